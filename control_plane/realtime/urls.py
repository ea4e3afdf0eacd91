"""HTTP routes of the realtime API, included under /v1/realtime/ (the WebSocket route is
in routing.py)."""

from django.urls import path

from control_plane.realtime import views

urlpatterns = [
    path("client_secrets", views.client_secrets, name="v1-realtime-client-secrets"),
]
