"""Audit log routes under /api/ (included by control_plane/api_urls.py)."""

from django.urls import path

from control_plane.audit.apis import AuditEntryListApi

urlpatterns = [path("audit/", AuditEntryListApi.as_view(), name="audit-list")]
