"""`size` strings ("1024x1024") as (width, height)."""

from __future__ import annotations

import re

from control_plane.inference.errors import ApiError

_SIZE = re.compile(r"^(\d{1,5})x(\d{1,5})$")
MAX_SIDE = 4096


def parse_size(value: str, param: str = "size") -> tuple[int, int]:
    match = _SIZE.match(value.strip().lower()) if isinstance(value, str) else None
    if not match:
        raise ApiError.invalid(param, f"'{param}' must look like WIDTHxHEIGHT (e.g. 512x512), got {value!r}.")
    width, height = int(match.group(1)), int(match.group(2))
    if not (1 <= width <= MAX_SIDE and 1 <= height <= MAX_SIDE):
        raise ApiError.invalid(param, f"'{param}' sides must be between 1 and {MAX_SIDE}, got {value!r}.")
    return width, height
