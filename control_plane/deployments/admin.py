from django.contrib import admin

from control_plane.audit.admin_mixin import AuditedAdminMixin
from control_plane.deployments.models import Deployment, Pipeline, Replica


@admin.register(Pipeline)
class PipelineAdmin(admin.ModelAdmin):
    list_display = ["name", "family", "variant", "version", "updated_at"]
    list_filter = ["family"]
    search_fields = ["name", "family"]


class ReplicaInline(admin.TabularInline):
    model = Replica
    extra = 0
    fields = ["stage", "group", "members", "index", "pool", "device", "host", "state", "restarts", "last_error"]
    readonly_fields = fields


@admin.register(Deployment)
class DeploymentAdmin(AuditedAdminMixin, admin.ModelAdmin):
    list_display = ["name", "pipeline", "state", "desired_state", "state_changed_at", "created_by"]
    list_filter = ["state", "desired_state", "pipeline__family"]
    search_fields = ["name", "model_dir"]
    inlines = [ReplicaInline]


@admin.register(Replica)
class ReplicaAdmin(admin.ModelAdmin):
    list_display = ["deployment", "stage", "group", "index", "pool", "state", "restarts", "last_heartbeat"]
    list_filter = ["state", "pool"]
    search_fields = ["deployment__name", "host", "last_error"]
