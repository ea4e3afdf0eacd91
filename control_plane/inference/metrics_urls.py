"""GET /metrics (Prometheus), for the lead to include at the root: path("", include(this))."""

from django.urls import path

from control_plane.inference.metrics import metrics_view

urlpatterns = [path("metrics", metrics_view, name="metrics")]
