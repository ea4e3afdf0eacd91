from django.urls import path

from control_plane.registry import apis

urlpatterns = [
    path("models/", apis.ModelListApi.as_view(), name="model-list"),
    path("models/<str:name>/", apis.ModelDetailApi.as_view(), name="model-detail"),
]
