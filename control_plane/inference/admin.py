from django.contrib import admin

from control_plane.inference.models import Artifact, InferenceRequest


class ArtifactInline(admin.TabularInline):
    model = Artifact
    extra = 0
    fields = ["kind", "index", "file", "mime_type", "size_bytes", "meta"]
    readonly_fields = fields


@admin.register(InferenceRequest)
class InferenceRequestAdmin(admin.ModelAdmin):
    list_display = ["request_id", "route", "deployment_name", "user", "status", "http_status", "e2el_s", "created_at"]
    list_filter = ["route", "status", "deployment_name"]
    search_fields = ["request_id", "deployment_name", "user__username"]
    readonly_fields = [field.name for field in InferenceRequest._meta.fields]
    inlines = [ArtifactInline]
