"""Request history routes under /api/ (included by control_plane/api_urls.py)."""

from django.urls import path

from control_plane.inference import apis

urlpatterns = [
    path("requests/", apis.RequestListApi.as_view(), name="request-list"),
    path("requests/<str:request_id>/", apis.RequestDetailApi.as_view(), name="request-detail"),
    path("artifacts/<str:artifact_id>/content/", apis.ArtifactContentApi.as_view(), name="artifact-content"),
]
