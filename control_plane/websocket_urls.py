"""WebSocket routes (Channels consumers). The console and realtime issues add theirs here."""

websocket_urlpatterns: list = []
