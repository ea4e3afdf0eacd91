"""Accounts routes under /api/ (included by control_plane/api_urls.py)."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from control_plane.accounts.apis import ApiKeyViewSet, QuotaApi, UsageApi, UsageExportApi

router = SimpleRouter()
router.register("keys", ApiKeyViewSet, basename="api-key")

urlpatterns = [
    path("usage/", UsageApi.as_view(), name="usage"),
    path("usage/export.csv", UsageExportApi.as_view(), name="usage-export"),
    path("quota/", QuotaApi.as_view(), name="quota"),
    *router.urls,
]
