"""Read-only REST over the audit log, for admins (the `admin` scope: staff sessions, staff keys)."""

from __future__ import annotations

from datetime import datetime

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import generics, serializers
from rest_framework.pagination import LimitOffsetPagination

from control_plane.accounts.models import ApiKey
from control_plane.accounts.permissions import require_scope
from control_plane.audit.models import Action, AuditEntry, Channel
from control_plane.audit.queries import audit_entry_list
from control_plane.query_moments import query_moment


@extend_schema_serializer(component_name="AuditQuery")
class AuditQuery(serializers.Serializer):
    actor = serializers.CharField(required=False, help_text="A username or a user id.")
    action = serializers.CharField(
        required=False, help_text=f"One of {', '.join(Action.values)}; or a prefix ending in '.', e.g. 'deployment.'."
    )
    target = serializers.CharField(required=False, help_text="The target's name, e.g. a deployment's.")
    target_kind = serializers.ChoiceField(choices=["deployment", "api_key", "quota"], required=False)
    channel = serializers.ChoiceField(choices=Channel.values, required=False)
    since = serializers.CharField(required=False, help_text="Date or ISO datetime (UTC if naive), inclusive.")
    until = serializers.CharField(required=False, help_text="Exclusive; a date means the end of that day.")

    def validate_since(self, value: str) -> datetime:
        return query_moment(value, end_of_day=False)

    def validate_until(self, value: str) -> datetime:
        return query_moment(value, end_of_day=True)


@extend_schema_serializer(component_name="AuditEntry")
class AuditEntryOutput(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name", help_text="Username at the time of the change.")
    actor_id = serializers.IntegerField(allow_null=True)
    details = serializers.JSONField(help_text="What changed: the target's main fields, and a from/to diff.")

    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "created_at",
            "actor",
            "actor_id",
            "api_key_prefix",
            "action",
            "target_kind",
            "target_id",
            "target_name",
            "details",
            "client_ip",
            "channel",
        ]


class AuditPagination(LimitOffsetPagination):
    default_limit = 50
    max_limit = 500


class AuditEntryListApi(generics.ListAPIView):
    """Who changed what, when and from where: deployments, API keys and quotas. Newest first."""

    permission_classes = [require_scope(ApiKey.Scope.ADMIN)]
    serializer_class = AuditEntryOutput
    pagination_class = AuditPagination

    @extend_schema(parameters=[AuditQuery])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        query = AuditQuery(data=self.request.query_params)
        query.is_valid(raise_exception=True)
        return audit_entry_list(**query.validated_data)
