"""`/v1/realtime` in front of the other WebSocket routes, with its own origin check.

control_plane/asgi.py wraps its WebSocket router with this:

    "websocket": realtime_websocket(AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(...))))
"""

from __future__ import annotations

from channels.auth import AuthMiddlewareStack

from control_plane.realtime.origin import api_origin_validator

REALTIME_PATH = "/v1/realtime"


def realtime_websocket(default):
    from control_plane.realtime.consumer import RealtimeConsumer

    realtime = api_origin_validator(AuthMiddlewareStack(RealtimeConsumer.as_asgi()))

    async def application(scope, receive, send):
        if scope.get("path", "").rstrip("/") == REALTIME_PATH:
            return await realtime(scope, receive, send)
        return await default(scope, receive, send)

    return application
