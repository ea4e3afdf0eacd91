"""A stage's sampling, merged once: the pipeline's default, then the deployment's per-stage
override (`DeployConfig.stages[name].sampling`), then the request's fields, validated once.

Every interface (the OpenAI routes, realtime, the console, the offline API) and the
orchestrator core build an AR stage's `SamplingParams` here, so precedence, the default
`max_tokens` (`stages.protocol.DEFAULT_MAX_TOKENS`) and the errors are the same everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from stages.errors import InvalidRequest
from stages.protocol import SamplingParams

SAMPLING_FIELDS: tuple[str, ...] = tuple(field.name for field in msgspec.structs.fields(SamplingParams))
"""The sampling fields a request may set, as `SamplingParams` spells them."""


def merge_sampling(
    pipeline: Mapping[str, Any] | None = None,
    deployment: Mapping[str, Any] | None = None,
    request: Mapping[str, Any] | None = None,
    *,
    param: str = "",
) -> SamplingParams:
    """The stage's `SamplingParams`: each layer's fields over the one before (a None value is
    not set). A string `stop` is one stop string. Raises InvalidRequest whose `param` names the
    offending field under `param` (`sampling_params_list[1].top_p`; `top_p` with no `param`) and
    whose `reason` says what is wrong with it."""
    merged: dict[str, Any] = {}
    for layer in (pipeline, deployment, request):
        if layer is None:
            continue
        if not isinstance(layer, Mapping):
            raise InvalidRequest(param or "sampling", f"Expected `object`, got `{type(layer).__name__}`")
        merged.update((key, value) for key, value in layer.items() if value is not None)
    if isinstance(merged.get("stop"), str):
        merged["stop"] = [merged["stop"]]
    try:
        sampling = msgspec.convert(merged, SamplingParams, strict=False)
        sampling.validate()
    except msgspec.ValidationError as error:
        text = str(error)
        raise InvalidRequest(_join(param, _field_of(text)), text.split(" - at ")[0]) from None
    except InvalidRequest as error:
        raise InvalidRequest(_join(param, error.param), error.message) from None
    return sampling


def _field_of(message: str) -> str | None:
    """msgspec says 'Object contains unknown field `temprature`' or '... - at `$.top_k`'."""
    if "unknown field `" in message:
        return message.split("unknown field `", 1)[1].split("`", 1)[0]
    if "`$." in message:
        return message.rsplit("`$.", 1)[1].rstrip("`")
    return None


def _join(param: str, field: str | None) -> str:
    if param and field:
        return f"{param}.{field}"
    return field or param or "sampling"
