"""The console's WebSocket routes (listed by control_plane/websocket_urls.py)."""

from django.urls import path

from console.consumers.models import ModelsConsumer
from console.consumers.playground import PlaygroundConsumer

websocket_urlpatterns = [
    path("ws/console/playground/", PlaygroundConsumer.as_asgi()),
    path("ws/console/models/", ModelsConsumer.as_asgi()),
]
