"""URLs with a NUL character refused in front of Django: PostgreSQL text cannot hold one, so a
`%00` in a path parameter or a query value would otherwise end as a database error (a 500)."""

from __future__ import annotations

from control_plane.system.asgi_errors import send_error


class NulGuard:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and _has_nul(scope):
            return await send_error(send, 400, "The URL contains a NUL character.", "invalid_url")
        return await self.app(scope, receive, send)


def _has_nul(scope) -> bool:
    query = scope.get("query_string", b"").lower()
    return "\x00" in scope.get("path", "") or b"%00" in query or b"\x00" in query
