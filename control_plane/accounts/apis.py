"""Self-service REST under /api/: own API keys, own usage, own remaining quota.

Thin views (HackSoft style): nested Input/Output serializers, work done in services and
selectors, access decided in permissions.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import redis
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer, inline_serializer
from rest_framework import exceptions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from control_plane.accounts.models import ApiKey, Metric, UsageRecord, Window
from control_plane.accounts.permissions import (
    AccessDenied,
    check_access,
    deployment_allow_list,
    is_admin,
    require_scope,
)
from control_plane.accounts.queries import (
    USAGE_AMOUNTS,
    USAGE_GROUPS,
    api_key_get,
    api_key_list,
    quota_status,
    usage_records,
    usage_summary,
)
from control_plane.accounts.renderers import FirstRendererNegotiation, UsageCsvRenderer
from control_plane.accounts.services import api_key_create, api_key_revoke
from control_plane.audit.models import Action
from control_plane.audit.services import audit_record
from control_plane.query_moments import query_moment


def _amount_field(name: str) -> serializers.Field:
    integral = name in ("text_tokens_in", "text_tokens_out", "images")
    return serializers.IntegerField() if integral else serializers.FloatField()


KEY_ID = OpenApiParameter("id", OpenApiTypes.INT, OpenApiParameter.PATH, description="API key id")


@extend_schema_serializer(component_name="ApiKey")
class ApiKeyOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField()
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=ApiKey.Scope.values))
    allowed_deployments = serializers.ListField(child=serializers.CharField())
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)
    last_used_at = serializers.DateTimeField(allow_null=True)
    is_active = serializers.BooleanField()


class ApiKeyViewSet(viewsets.ViewSet):
    """The caller's own API keys. The secret is in the create response only."""

    permission_classes = [require_scope(ApiKey.Scope.KEYS)]
    lookup_value_regex = r"[0-9]+"

    @extend_schema_serializer(component_name="ApiKeyCreateInput")
    class CreateInputSerializer(serializers.Serializer):
        name = serializers.CharField(max_length=100)
        scopes = serializers.ListField(
            child=serializers.ChoiceField(choices=ApiKey.Scope.values), required=False, allow_empty=False
        )
        expires_at = serializers.DateTimeField(required=False, allow_null=True)
        allowed_deployments = serializers.ListField(
            child=serializers.CharField(max_length=200), required=False, help_text="Empty: every deployment."
        )

    @extend_schema_serializer(component_name="ApiKeyCreated")
    class CreateOutputSerializer(ApiKeyOutputSerializer):
        key = serializers.CharField(help_text="The secret. Shown this once; only its hash is stored.")

    @extend_schema(responses=ApiKeyOutputSerializer(many=True))
    def list(self, request):
        return Response(ApiKeyOutputSerializer(api_key_list(user=request.user), many=True).data)

    @extend_schema(request=CreateInputSerializer, responses={201: CreateOutputSerializer})
    @transaction.atomic
    def create(self, request):
        data = _valid(self.CreateInputSerializer, request.data)
        try:
            key, secret = api_key_create(user=request.user, created_with=_api_key(request), **data)
        except DjangoValidationError as error:
            raise exceptions.ValidationError(serializers.as_serializer_error(error)) from None
        audit_record(request, Action.API_KEY_CREATE, key)
        body = {**ApiKeyOutputSerializer(key).data, "key": secret}
        return Response(body, status=status.HTTP_201_CREATED, headers={"Cache-Control": "no-store"})

    @extend_schema(parameters=[KEY_ID], responses=ApiKeyOutputSerializer)
    def retrieve(self, request, pk=None):
        return Response(ApiKeyOutputSerializer(_own_key(request, pk)).data)

    @extend_schema(parameters=[KEY_ID], request=None, responses=ApiKeyOutputSerializer)
    @action(detail=True, methods=["post"])
    @transaction.atomic
    def revoke(self, request, pk=None):
        key = api_key_revoke(key=_own_key(request, pk))
        audit_record(request, Action.API_KEY_REVOKE, key)
        return Response(ApiKeyOutputSerializer(key).data)


class UsageApi(APIView):
    """Usage summed per group over [start, end). Own usage; `user=<id>|all` needs the admin scope."""

    permission_classes = [require_scope(ApiKey.Scope.INFERENCE)]
    renderer_classes = [*api_settings.DEFAULT_RENDERER_CLASSES, UsageCsvRenderer]

    @extend_schema_serializer(component_name="UsageQuery")
    class InputSerializer(serializers.Serializer):
        start = serializers.CharField(
            required=False, help_text="Date or ISO datetime (UTC if naive); default: 30 days ago."
        )
        end = serializers.CharField(
            required=False, help_text="Exclusive; a date means the end of that day; default: now."
        )
        group_by = serializers.CharField(
            required=False, default="", help_text=f"Comma-separated, any of: {', '.join(USAGE_GROUPS)}."
        )
        user = serializers.CharField(required=False, help_text="Admin scope only: a user id, or 'all'.")
        key = serializers.IntegerField(required=False, help_text="Only this API key (id).")
        deployment = serializers.CharField(required=False)
        modality = serializers.ChoiceField(choices=UsageRecord.Modality.values, required=False)

        def validate_group_by(self, value: str) -> list[str]:
            groups = [group.strip() for group in value.split(",") if group.strip()]
            unknown = [group for group in groups if group not in USAGE_GROUPS]
            if unknown:
                raise serializers.ValidationError(f"unknown groups {unknown}; expected some of {list(USAGE_GROUPS)}")
            return list(dict.fromkeys(groups))

        def validate_start(self, value: str) -> datetime:
            return query_moment(value, end_of_day=False)

        def validate_end(self, value: str) -> datetime:
            return query_moment(value, end_of_day=True)

    @extend_schema_serializer(component_name="UsageSummary")
    class OutputSerializer(serializers.Serializer):
        start = serializers.DateTimeField()
        end = serializers.DateTimeField()
        group_by = serializers.ListField(child=serializers.CharField())
        rows = serializers.ListField(child=serializers.DictField(), help_text="Group columns plus the amounts.")
        totals = inline_serializer(
            "UsageTotals",
            {"requests": serializers.IntegerField(), **{name: _amount_field(name) for name in USAGE_AMOUNTS}},
        )

    @extend_schema(parameters=[InputSerializer], responses={200: OutputSerializer, (200, "text/csv"): OpenApiTypes.STR})
    def get(self, request, *args, **kwargs):
        params = _valid(self.InputSerializer, request.query_params)
        end = params.get("end") or timezone.now()
        start = params.get("start") or end - timedelta(days=30)
        if start >= end:
            raise exceptions.ValidationError({"start": "start must be before end."})
        records = usage_records(
            start=start,
            end=end,
            user=_usage_user(request, params.get("user")),
            api_key_id=params.get("key"),
            deployments=_usage_deployments(request, params.get("deployment")),
            modality=params.get("modality"),
        )
        rows, totals = usage_summary(records, params["group_by"])
        body = {"start": start, "end": end, "group_by": params["group_by"], "rows": rows, "totals": totals}
        return Response(self.OutputSerializer(body).data)


class UsageExportApi(UsageApi):
    """The same summary as CSV, whatever the Accept header."""

    renderer_classes = [UsageCsvRenderer]
    content_negotiation_class = FirstRendererNegotiation

    @extend_schema(parameters=[UsageApi.InputSerializer], responses={(200, "text/csv"): OpenApiTypes.STR})
    def get(self, request, *args, **kwargs):
        response = super().get(request, *args, **kwargs)
        response["Content-Disposition"] = 'attachment; filename="usage.csv"'
        return response


class QuotaApi(APIView):
    """The limits that apply to the caller (its user, and its key if it uses one) and what is left."""

    permission_classes = [require_scope(ApiKey.Scope.INFERENCE)]
    renderer_classes = [JSONRenderer]

    @extend_schema_serializer(component_name="QuotaLimit")
    class OutputSerializer(serializers.Serializer):
        subject = serializers.ChoiceField(choices=["user", "key"])
        metric = serializers.ChoiceField(choices=Metric.values)
        window = serializers.ChoiceField(choices=Window.values)
        limit = serializers.IntegerField()
        used = serializers.FloatField()
        remaining = serializers.FloatField()
        reset_seconds = serializers.FloatField(help_text="Until the window resets (0 for concurrency).")

    @extend_schema(
        responses=inline_serializer("QuotaStatus", {"limits": OutputSerializer(many=True)}),
    )
    def get(self, request, *args, **kwargs):
        try:
            states = quota_status(user=request.user, api_key=_api_key(request))
        except redis.RedisError:
            raise QuotaServiceUnavailable() from None
        limits = [
            {
                "subject": state.limit.subject_kind,
                "metric": state.limit.metric,
                "window": state.limit.window,
                "limit": state.limit.limit,
                "used": state.used,
                "remaining": state.remaining,
                "reset_seconds": round(state.reset_s, 3),
            }
            for state in states
        ]
        return Response({"limits": self.OutputSerializer(limits, many=True).data})


class QuotaServiceUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "Quota service unavailable; please retry."
    default_code = "service_unavailable"


def _valid(serializer_class, data) -> dict:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _api_key(request) -> ApiKey | None:
    return request.auth if isinstance(request.auth, ApiKey) else None


def _own_key(request, pk) -> ApiKey:
    key = api_key_get(user=request.user, key_id=pk)
    if key is None:
        raise exceptions.NotFound("No such API key.")
    return key


def _usage_user(request, user_param: str | None):
    """Whose usage: the caller's own, unless an admin asks for a user id or 'all' (None)."""
    if user_param is None:
        return request.user
    if not is_admin(request.user, _api_key(request)):
        raise exceptions.PermissionDenied("Only the admin scope may read other users' usage.")
    if user_param == "all":
        return None
    if not user_param.isdigit():
        raise exceptions.ValidationError({"user": "Expected a user id or 'all'."})
    return get_user_model().objects.filter(pk=int(user_param)).first() or _no_such_user()


def _no_such_user():
    raise exceptions.ValidationError({"user": "No such user."})


def _usage_deployments(request, deployment: str | None) -> list[str] | None:
    """A key with an allow-list sees only those deployments; asking for another one is refused."""
    key = _api_key(request)
    if deployment is not None:
        try:
            check_access(request.user, key, ApiKey.Scope.INFERENCE, deployment)
        except AccessDenied as denied:
            raise exceptions.PermissionDenied(denied.message) from None
        return [deployment]
    return deployment_allow_list(key)
