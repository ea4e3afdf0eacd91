"""What a decoded JSON body may hold before any view reads it: a bounded nesting depth,
finite numbers, integers that fit the 64-bit wire format, and strings that are valid Unicode
(a lone surrogate such as "\\ud800" decodes from JSON but can be neither encoded again nor
stored). The /v1 views (openai_compat/bodies.py), realtime events and the REST API's parser
(json_parser.py) check every body with it, so no such value reaches the orchestrator's
encoder or the database."""

from __future__ import annotations

import math
from typing import Any

MAX_DEPTH = 64
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1  # msgpack's widest unsigned integer


class HostileJson(ValueError):
    def __init__(self, param: str | None, message: str):
        super().__init__(message)
        self.param = param
        self.message = message


def check_json_values(data: Any) -> None:
    """HostileJson naming the first offending field. Iterative: a recursive walk would itself
    overflow on deep input."""
    pending: list[tuple[Any, str, int]] = [(data, "", 0)]
    while pending:
        value, param, depth = pending.pop()
        if isinstance(value, dict):
            _check_depth(depth, param)
            for key, item in value.items():
                _check_text(str(key), param)
                pending.append((item, f"{param}.{key}" if param else str(key), depth + 1))
        elif isinstance(value, list):
            _check_depth(depth, param)
            pending.extend((item, f"{param}[{index}]", depth + 1) for index, item in enumerate(value))
        elif isinstance(value, str):
            _check_text(value, param)
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int) and not INT_MIN <= value <= INT_MAX:
            raise HostileJson(param or None, f"Invalid value for '{param}': integer out of range.")
        elif isinstance(value, float) and not math.isfinite(value):
            raise HostileJson(param or None, f"Invalid value for '{param}': numbers must be finite.")


def _check_depth(depth: int, param: str) -> None:
    if depth >= MAX_DEPTH:
        raise HostileJson(param or None, f"The JSON body is nested deeper than {MAX_DEPTH} levels.")


def _check_text(text: str, param: str) -> None:
    if "\x00" in text:  # PostgreSQL text cannot hold it
        where = f" for '{param}'" if param else ""
        raise HostileJson(param or None, f"Invalid value{where}: the string contains a NUL character.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        where = f" for '{param}'" if param else ""
        raise HostileJson(param or None, f"Invalid value{where}: the string is not valid Unicode.") from None
