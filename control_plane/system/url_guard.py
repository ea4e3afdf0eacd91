"""URLs no route serves, refused in front of Django:

- a NUL character (`%00`) in the path or query: PostgreSQL text cannot hold one, so a path
  parameter or a query value with it would otherwise end as a database error (a 500);
- a `..` segment, or under /static/ an empty segment (`%2f` decodes to `/`): no route has
  one, and the static files finder raises on a path that leaves its directory, which logged
  a traceback with the server's absolute paths on every such request.
"""

from __future__ import annotations

from control_plane.system.asgi_errors import send_error


class UrlGuard:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            path = scope.get("path", "")
            if _has_nul(scope):
                return await send_error(send, 400, "The URL contains a NUL character.", "invalid_url")
            if _leaves_its_directory(path):
                return await send_error(send, 404, f"Unknown request URL: {scope['method']} {path}.", "unknown_url")
        return await self.app(scope, receive, send)


def _has_nul(scope) -> bool:
    query = scope.get("query_string", b"").lower()
    return "\x00" in scope.get("path", "") or b"%00" in query or b"\x00" in query


def _leaves_its_directory(path: str) -> bool:
    segments = path.split("/")
    if ".." in segments or "\\" in path:
        return True
    return path.startswith("/static/") and "" in segments[2:-1]
