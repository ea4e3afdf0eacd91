from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.permissions import AllowAny

from control_plane.system import views as system_views

PUBLIC = {"authentication_classes": [], "permission_classes": [AllowAny]}

urlpatterns = [
    path("health", system_views.health, name="health"),
    path("ready", system_views.ready, name="ready"),
    path("admin/", admin.site.urls),
    # public, whatever credentials come along (a bad key must not turn the schema into a 401)
    path("api/schema/", SpectacularAPIView.as_view(**PUBLIC), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema", **PUBLIC), name="api-docs"),
    path("api/", include("control_plane.api_urls")),
    path("v1/", include("control_plane.openai_compat.urls")),
    path("", include("control_plane.inference.metrics_urls")),
    path("", include("console.urls")),
]

# Console pages for errors outside the API (console/views/errors.py keeps the API's paths plain)
handler403 = "console.views.errors.permission_denied"
handler404 = "console.views.errors.page_not_found"
handler500 = "console.views.errors.server_error"
