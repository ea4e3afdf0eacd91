"""WebSocket routes (Channels consumers). The console and realtime issues add theirs here.

The console's routes are referenced by dotted path, as urls.py includes "console.urls",
so that the control plane keeps no import of the console (import-linter contract).
"""

from django.utils.module_loading import import_string

websocket_urlpatterns: list = [
    *import_string("console.websocket_urls.websocket_urlpatterns"),
]
