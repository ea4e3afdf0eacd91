"""REST routes under /api/ (DRF). Each app contributes its router."""

from django.urls import include, path

urlpatterns = [
    path("", include("control_plane.accounts.urls")),
]
