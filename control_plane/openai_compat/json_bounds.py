"""What a decoded JSON body may hold before any view reads it: a bounded nesting depth,
integers that fit the 64-bit wire format, and strings that are valid Unicode (a lone
surrogate such as "\\ud800" decodes from JSON but cannot be encoded again). Each refusal is a
400 naming the offending field, so no hostile value reaches the orchestrator's encoder."""

from __future__ import annotations

from typing import Any

from control_plane.inference.errors import ApiError

MAX_DEPTH = 64
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1  # msgpack's widest unsigned integer


def check_json_values(data: Any) -> None:
    """Walk `data` iteratively (a recursive walk would itself overflow on deep input)."""
    pending: list[tuple[Any, str, int]] = [(data, "", 0)]
    while pending:
        value, param, depth = pending.pop()
        if isinstance(value, dict):
            _check_depth(depth, param)
            for key, item in value.items():
                _check_text(key, param or "(body)")
                pending.append((item, f"{param}.{key}" if param else key, depth + 1))
        elif isinstance(value, list):
            _check_depth(depth, param)
            pending.extend((item, f"{param}[{index}]", depth + 1) for index, item in enumerate(value))
        elif isinstance(value, str):
            _check_text(value, param)
        elif isinstance(value, int) and not isinstance(value, bool) and not INT_MIN <= value <= INT_MAX:
            raise ApiError.invalid(
                param or None, f"Invalid value for '{param}': integer out of range.", "invalid_value"
            )


def _check_depth(depth: int, param: str) -> None:
    if depth >= MAX_DEPTH:
        raise ApiError.invalid(
            param or None, f"The JSON body is nested deeper than {MAX_DEPTH} levels.", "invalid_json"
        )


def _check_text(text: str, param: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError.invalid(
            param or None,
            f"Invalid value for '{param}': the string is not valid Unicode (a lone surrogate).",
            "invalid_value",
        ) from None
