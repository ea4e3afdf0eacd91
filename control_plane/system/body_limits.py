"""Request-body byte limits per route, enforced in front of Django.

Django's ASGI handler reads a whole body (spooling it to disk) before any view runs, so a
view's own size check comes after the bytes have been received. This ASGI wrapper refuses a
body from its declared Content-Length before reading it, and counts the bytes of one sent
without a length (chunked), so an oversized body costs the server no more than its limit.
The refusal is a 413 in OpenAI's error shape.

Limits are by path prefix (the longest matching prefix wins): `settings.BODY_LIMITS`, from
OMNISTAGE_MAX_REQUEST_BYTES and OMNISTAGE_BODY_LIMITS (docs/security.md).
"""

from __future__ import annotations

from django.conf import settings

from control_plane.system.asgi_errors import send_error

MIB = 1024 * 1024


def default_body_limits(max_request_bytes: int) -> dict[str, int]:
    """Routes that carry media (inline base64 or uploads) get the server-wide limit; routes of
    text and small JSON get much less."""
    return {
        "": max_request_bytes,
        "/api/": 1 * MIB,
        "/api/models/": max_request_bytes,  # checkpoint archives
        "/v1/": 1 * MIB,
        "/v1/chat/completions": max_request_bytes,
        "/v1/responses": max_request_bytes,
        "/v1/audio/transcriptions": max_request_bytes,
        "/v1/audio/translations": max_request_bytes,
        "/v1/images/edits": max_request_bytes,
        "/v1/videos": max_request_bytes,
        "/v1/completions": 2 * MIB,
        "/v1/realtime/": 1 * MIB,
    }


def limit_for(path: str, limits: dict[str, int]) -> int:
    prefix = max((p for p in limits if path.startswith(p)), key=len, default="")
    return limits.get(prefix, max(limits.values(), default=0))


class BodyTooLarge(Exception):
    pass


class BodyLimit:
    """ASGI middleware around the HTTP application."""

    def __init__(self, app, limits: dict[str, int] | None = None):
        self.app = app
        self.limits = limits

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = limit_for(scope["path"], self.limits or settings.BODY_LIMITS)
        declared = _content_length(scope)
        if declared is None:
            return await send_error(send, 400, "Invalid Content-Length header.", "invalid_request")
        if declared > limit:
            return await _refuse_too_large(send, declared, limit)
        counted = CountedBody(receive, limit)
        started = False

        async def tracked_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        await self.app(scope, counted.receive, tracked_send)
        if counted.exceeded and not started:
            await _refuse_too_large(send, counted.received, limit)


class CountedBody:
    """`receive` that stops at `limit` bytes: past it the application sees the client gone
    (Django then abandons the request without answering, and BodyLimit answers 413)."""

    def __init__(self, receive, limit: int):
        self._receive = receive
        self.limit = limit
        self.received = 0
        self.exceeded = False

    async def receive(self):
        if self.exceeded:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.limit:
                self.exceeded = True
                return {"type": "http.disconnect"}
        return message


def _content_length(scope) -> int | None:
    """The declared length (0 when none is declared), None when it is malformed."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                return None
            return length if length >= 0 else None
    return 0


async def _refuse_too_large(send, size: int, limit: int) -> None:
    message = f"Request body of {size} bytes exceeds this route's limit of {limit} bytes."
    await send_error(send, 413, message, "request_too_large")
