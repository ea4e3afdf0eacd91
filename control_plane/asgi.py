"""ASGI entry point: HTTP through Django, WebSockets through Channels routing."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")

from control_plane.system.asgi_handler import get_asgi_application  # noqa: E402 - after the settings module

django_asgi_app = get_asgi_application()

from control_plane import invalidation  # noqa: E402
from control_plane.system.reason_phrases import register_reason_phrases  # noqa: E402

register_reason_phrases()  # daphne's status lines name every code (429 Too Many Requests)

invalidation.listener().start()  # the caches of the hot path answer from the first requests on

from channels.auth import AuthMiddlewareStack  # noqa: E402 - needs Django set up first
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from control_plane.realtime.routing import realtime_websocket  # noqa: E402
from control_plane.system.body_limits import BodyLimit  # noqa: E402
from control_plane.system.daphne_forms import skip_twisted_form_parsing  # noqa: E402
from control_plane.system.url_guard import UrlGuard  # noqa: E402
from control_plane.websocket_urls import websocket_urlpatterns  # noqa: E402

skip_twisted_form_parsing()

application = ProtocolTypeRouter(
    {
        "http": UrlGuard(BodyLimit(django_asgi_app)),
        "websocket": realtime_websocket(
            AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
        ),
    }
)
