from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from control_plane.system import views as system_views

urlpatterns = [
    path("health", system_views.health, name="health"),
    path("ready", system_views.ready, name="ready"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/", include("control_plane.api_urls")),
    path("v1/", include("control_plane.openai_compat.urls")),
    path("", include("control_plane.inference.metrics_urls")),
    path("", include("console.urls")),
]

# Console pages for errors outside the API (console/views/errors.py keeps the API's paths plain)
handler403 = "console.views.errors.permission_denied"
handler404 = "console.views.errors.page_not_found"
handler500 = "console.views.errors.server_error"
