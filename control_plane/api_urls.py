"""REST routes under /api/ (DRF). Each app contributes its own."""

from django.urls import include, path

urlpatterns = [
    path("", include("control_plane.deployments.urls")),
    path("", include("control_plane.accounts.urls")),
    path("", include("control_plane.inference.urls")),
    path("", include("control_plane.registry.urls")),
    path("", include("control_plane.audit.urls")),
]
