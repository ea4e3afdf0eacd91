"""A plain client of Omnistage's public API (HTTP, SSE, WebSocket): no Django, no torch.

It is what `omnistage bench serve` (and `python manage.py bench serve`) runs; it talks to a
platform only through the endpoints users call, so it measures a running deployment anywhere.
"""
