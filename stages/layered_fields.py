"""Per-request structs (a stage's sampling, the diffusion knobs) built once from layers: each
layer's fields over the one before (a None value is not set), converted to the struct and
validated, every error an InvalidRequest whose `param` names the field under the caller's
`param` (`sampling_params_list[1].top_p`) and whose `reason` says what is wrong with it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

from stages.errors import InvalidRequest

Struct = TypeVar("Struct", bound=msgspec.Struct)


def merged_layers(layers: tuple[Mapping[str, Any] | None, ...], *, param: str, what: str) -> dict[str, Any]:
    """The fields of `layers`, later over earlier; `what` names the whole when `param` is empty."""
    merged: dict[str, Any] = {}
    for layer in layers:
        if layer is None:
            continue
        if not isinstance(layer, Mapping):
            raise InvalidRequest(param or what, f"Expected `object`, got `{type(layer).__name__}`")
        merged.update((key, value) for key, value in layer.items() if value is not None)
    return merged


def checked(kind: type[Struct], fields: dict[str, Any], *, param: str, what: str) -> Struct:
    """`fields` as a `kind` whose `validate()` passed."""
    try:
        value = msgspec.convert(fields, kind, strict=False)
        value.validate()
    except msgspec.ValidationError as error:
        text = str(error)
        raise InvalidRequest(_join(param, _field_of(text), what), text.split(" - at ")[0]) from None
    except InvalidRequest as error:
        raise InvalidRequest(_join(param, error.param, what), error.reason) from None
    return value


def _field_of(message: str) -> str | None:
    """msgspec says 'Object contains unknown field `temprature`' or '... - at `$.top_k`'."""
    if "unknown field `" in message:
        return message.split("unknown field `", 1)[1].split("`", 1)[0]
    if "`$." in message:
        return message.rsplit("`$.", 1)[1].rstrip("`")
    return None


def _join(param: str, field: str | None, what: str) -> str:
    if param and field:
        return f"{param}.{field}"
    return field or param or what
