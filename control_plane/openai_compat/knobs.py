"""A request's diffusion knobs (stages/diffusion_knobs.py) as an OpenAI route takes them: a bad value
answers 400 naming the field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from control_plane.inference.errors import ApiError
from control_plane.openai_compat.sizes import parse_size
from stages.diffusion_knobs import DiffusionKnobs, diffusion_knobs
from stages.errors import InvalidRequest

KNOB_FIELDS = ("width", "height", "num_inference_steps", "guidance_scale", "negative_prompt", "seed")
"""The knobs the chat-style bodies carry as top-level fields (with `size`, parsed into width and height)."""


def request_knobs(*layers: Mapping[str, Any] | None, param: str = "") -> DiffusionKnobs:
    """The knobs of `layers` (each over the one before), converted and validated; a 400 naming the
    field (under `param`, e.g. `sampling_params_list[0].seed`)."""
    try:
        return diffusion_knobs(*layers, param=param)
    except InvalidRequest as error:
        raise ApiError(400, f"Invalid value for '{error.param}': {error.reason}.", param=error.param) from None


def body_knobs(body: Any) -> dict[str, Any]:
    """The knobs a chat-style body sets as top-level fields (`size` as width and height, under
    explicit `width` and `height`)."""
    fields: dict[str, Any] = {}
    if getattr(body, "size", None):
        fields["width"], fields["height"] = parse_size(body.size)
    for name in KNOB_FIELDS:
        value = getattr(body, name, None)
        if value is not None:
            fields[name] = value
    return fields
