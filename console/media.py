"""Media bytes for the browser."""

from __future__ import annotations

import base64


def data_url(data: bytes, mime_type: str) -> str:
    return f"data:{mime_type};base64,{base64.b64encode(data).decode()}"
