"""A request's diffusion knobs (size, steps, guidance, seed...), typed and checked once at the edge.

Every interface (the OpenAI routes, the console, the offline API, the warm-up) builds them with
`diffusion_knobs`, which converts and validates them and names the offending field; they travel on
`RequestOptions.diffusion` to every stage of the request. What depends on the deployment (a
size's multiple, the most steps or frames it allows, video or image) is checked by the stage
(stages/diffusion/params.py), which reads these fields as they are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import msgspec

from stages.errors import InvalidRequest
from stages.layered_fields import checked, merged_layers

IMAGE_FORMATS = ("png", "jpeg", "webp", "np")
VIDEO_FORMATS = ("mp4", "np")
SEEDS = (-(2**63), 2**63 - 1)
"""A seed is a signed 64-bit integer, as chat's `seed` (also the entry stage's sampling seed) may be:
torch's generators take negative seeds too."""


class DiffusionKnobs(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """What a request asks of a diffusion stage; None: the stage's default. `validate()` names the
    offending field."""

    width: int | None = None
    height: int | None = None
    num_inference_steps: int | None = None
    guidance_scale: float | None = None
    negative_prompt: str | None = None
    seed: int | None = None
    """Also the noise seed of a token2wav vocoder (stages/generation/token2wav.py)."""
    strength: float | None = None
    """An edit's: how much noise its input image gets (stages/diffusion/image_to_image.py)."""
    num_frames: int | None = None
    output_format: str | None = None
    """png, jpeg (or jpg), webp, np for images; mp4, np for video."""
    fps: int | None = None
    """A video's frame rate (None: the pipeline's)."""

    def fields(self) -> dict[str, Any]:
        """The knobs this request sets, by name."""
        return {name: value for name, value in msgspec.structs.asdict(self).items() if value is not None}

    def validate(self) -> None:
        for name in ("width", "height", "num_inference_steps", "num_frames", "fps"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InvalidRequest(name, f"must be at least 1, got {value}")
        if self.guidance_scale is not None and not (math.isfinite(self.guidance_scale) and self.guidance_scale >= 0):
            raise InvalidRequest("guidance_scale", f"must be a finite number >= 0, got {self.guidance_scale}")
        if self.seed is not None and not SEEDS[0] <= self.seed <= SEEDS[1]:
            raise InvalidRequest("seed", "must be a 64-bit signed integer (-2**63 to 2**63 - 1)")
        if self.strength is not None and not (math.isfinite(self.strength) and 0 < self.strength <= 1):
            raise InvalidRequest("strength", f"must be in (0, 1], got {self.strength}")
        formats = dict.fromkeys(IMAGE_FORMATS + VIDEO_FORMATS)
        if self.output_format is not None and self.output_format not in formats:
            raise InvalidRequest("output_format", f"must be one of {', '.join(formats)}, got {self.output_format!r}")


def diffusion_knobs(*layers: Mapping[str, Any] | None, param: str = "") -> DiffusionKnobs:
    """The knobs of `layers`, each over the one before (a None value is not set), converted and
    validated. Raises InvalidRequest whose `param` names the field under `param`
    (`sampling_params_list[0].seed`; `seed` with no `param`) and whose `reason` says what is wrong."""
    merged = merged_layers(layers, param=param, what="diffusion")
    if isinstance(merged.get("output_format"), str):
        merged["output_format"] = _format_name(merged["output_format"])
    return checked(DiffusionKnobs, merged, param=param, what="diffusion")


def _format_name(name: str) -> str:
    name = name.lower()
    return "jpeg" if name == "jpg" else name
