from django.contrib import admin

from control_plane.audit.admin_mixin import AuditedAdminMixin
from control_plane.deployments.models import Deployment, DeploymentRevision, Pipeline, Replica
from control_plane.deployments.pipeline_revisions import pipeline_revision_record


@admin.register(Pipeline)
class PipelineAdmin(admin.ModelAdmin):
    list_display = ["name", "family", "variant", "version", "updated_at"]
    list_filter = ["family"]
    search_fields = ["name", "family"]

    def save_model(self, request, obj, form, change):
        previous = Pipeline.objects.filter(pk=obj.pk).values_list("config", flat=True).first() if change else None
        if change and previous != obj.config:
            obj.version += 1
        super().save_model(request, obj, form, change)
        if not change or previous != obj.config:
            pipeline_revision_record(obj, previous, source="admin", user=request.user)


class ReplicaInline(admin.TabularInline):
    model = Replica
    extra = 0
    fields = ["stage", "group", "members", "index", "revision", "retired", "pool", "device", "host", "state",
              "restarts", "last_error"]  # fmt: skip
    readonly_fields = fields


@admin.register(DeploymentRevision)
class DeploymentRevisionAdmin(admin.ModelAdmin):
    """The history is written by changes, never edited."""

    list_display = ["deployment", "number", "state", "rollback_of", "created_by", "created_at", "finished_at"]
    list_filter = ["state"]
    search_fields = ["deployment__name"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


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
