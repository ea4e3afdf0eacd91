"""Server-sent events for the streaming routes, served by `StreamingHttpResponse` over an
async generator (daphne sends each event as it is yielded)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from django.http import StreamingHttpResponse

DONE = b"data: [DONE]\n\n"


def event(data: dict, name: str | None = None) -> bytes:
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    prefix = f"event: {name}\n" if name else ""
    return f"{prefix}data: {body}\n\n".encode()


def sse_response(events: AsyncIterator[bytes], headers: dict[str, str] | None = None) -> StreamingHttpResponse:
    response = StreamingHttpResponse(events, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    for name, value in (headers or {}).items():
        response[name] = value
    return response
