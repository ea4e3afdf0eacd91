"""REST for request history under /api/requests/ (DRF).

- GET /api/requests/?deployment=&status=&route=&modality=&user=&since=&until=&limit=&offset=
- GET /api/requests/<request id or uuid>/          detail with artifacts (signed download URLs)
- GET /api/artifacts/<uuid>/content/               the artifact's bytes

Owners see their own requests; the admin scope sees everyone's (and may filter by user). A key
with a deployment allow-list sees only the requests made to those deployments.
"""

from __future__ import annotations

from django.http import FileResponse
from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.response import Response
from rest_framework.views import APIView

from control_plane.accounts.models import ApiKey
from control_plane.accounts.permissions import deployment_allow_list, is_admin, require_scope
from control_plane.inference import queries
from control_plane.inference.models import Route, Status
from control_plane.inference.signing import signed_artifact_url


class ArtifactOutput(serializers.Serializer):
    id = serializers.UUIDField()
    kind = serializers.CharField()
    index = serializers.IntegerField()
    mime_type = serializers.CharField()
    size_bytes = serializers.IntegerField()
    meta = serializers.JSONField()
    created_at = serializers.DateTimeField()
    download_url = serializers.SerializerMethodField()
    signed_url = serializers.SerializerMethodField()

    def get_download_url(self, artifact) -> str:
        return self.context["request"].build_absolute_uri(f"/api/artifacts/{artifact.id}/content/")

    def get_signed_url(self, artifact) -> str:
        return signed_artifact_url(self.context["request"], artifact)[0]


class RequestOutput(serializers.Serializer):
    id = serializers.UUIDField()
    request_id = serializers.CharField()
    user = serializers.CharField(source="user.username", default=None, allow_null=True)
    api_key = serializers.CharField(source="api_key.prefix", default=None, allow_null=True)
    deployment = serializers.CharField(source="deployment_name")
    route = serializers.CharField()
    stream = serializers.BooleanField()
    modalities = serializers.ListField(source="modality_list", child=serializers.CharField())
    status = serializers.CharField()
    http_status = serializers.IntegerField(allow_null=True)
    finish_reason = serializers.CharField()
    error = serializers.JSONField(allow_null=True)
    usage = serializers.JSONField()
    queue_s = serializers.FloatField(allow_null=True)
    ttft_s = serializers.FloatField(allow_null=True)
    tpot_s = serializers.FloatField(allow_null=True)
    ttfp_s = serializers.FloatField(allow_null=True)
    e2el_s = serializers.FloatField(allow_null=True)
    rtf = serializers.FloatField(allow_null=True)
    stage_metrics = serializers.JSONField()
    progress = serializers.FloatField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


class RequestDetailOutput(RequestOutput):
    inputs = serializers.JSONField()
    parameters = serializers.JSONField()
    output_text = serializers.CharField()
    artifacts = ArtifactOutput(many=True)


DEFAULT_PAGE, MAX_PAGE = 50, 500


class RequestPage(serializers.Serializer):
    """One page of the history (limit/offset pagination)."""

    count = serializers.IntegerField(help_text="Rows matching the filters, over every page.")
    next = serializers.URLField(allow_null=True, help_text="The next page's URL; null on the last page.")
    previous = serializers.URLField(allow_null=True, help_text="The previous page's URL; null on the first page.")
    results = RequestOutput(many=True)


class RequestQuery(serializers.Serializer):
    deployment = serializers.CharField(required=False)
    status = serializers.ChoiceField(choices=Status.values, required=False)
    route = serializers.ChoiceField(choices=Route.values, required=False)
    modality = serializers.ChoiceField(choices=["text", "audio", "image", "video"], required=False)
    user = serializers.IntegerField(required=False, help_text="A user's id. Admin scope only.")
    since = serializers.CharField(
        required=False, help_text="ISO 8601 date (YYYY-MM-DD) or datetime, inclusive; UTC unless it has an offset."
    )
    until = serializers.CharField(
        required=False, help_text="ISO 8601 date (YYYY-MM-DD) or datetime, exclusive; UTC unless it has an offset."
    )
    limit = serializers.IntegerField(required=False, min_value=1, max_value=MAX_PAGE, help_text="Rows per page.")
    offset = serializers.IntegerField(required=False, min_value=0, help_text="Rows to skip.")

    def to_internal_value(self, data):
        # DRF drops an empty optional query parameter (`?user=`) silently: a filter the client
        # meant to set would be ignored, so it is refused instead
        empty = {name: ["This parameter may not be empty."] for name in self.fields if data.get(name) == ""}
        if empty:
            raise serializers.ValidationError(empty)
        return super().to_internal_value(data)

    def validate_since(self, value):
        return _moment(value)

    def validate_until(self, value):
        return _moment(value)


def _moment(value: str):
    from datetime import UTC, datetime, time

    from django.utils import timezone

    moment = parse_datetime(value)
    if moment is None:
        day = parse_date(value)
        if day is None:
            raise serializers.ValidationError("expected an ISO date or datetime")
        moment = datetime.combine(day, time.min)
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, UTC)
    return moment


def _visibility(request) -> dict:
    """Whose history the caller reads (the selectors' viewer, see_all and deployments)."""
    api_key = request.auth if isinstance(request.auth, ApiKey) else None
    return {
        "viewer": request.user,
        "see_all": is_admin(request.user, api_key),
        "deployments": deployment_allow_list(api_key),
    }


class RequestListApi(APIView):
    permission_classes = [require_scope(ApiKey.Scope.INFERENCE)]

    @extend_schema(parameters=[RequestQuery], responses=RequestPage)
    def get(self, request):
        query = RequestQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        visibility = _visibility(request)
        filters = {k: v for k, v in query.validated_data.items() if k not in ("limit", "offset")}
        if "user" in filters and not visibility["see_all"]:
            raise exceptions.PermissionDenied("Filtering by user needs the admin scope.")
        rows = queries.request_list(**visibility, **filters)
        paginator = LimitOffsetPagination()
        paginator.default_limit = DEFAULT_PAGE
        paginator.max_limit = MAX_PAGE
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(RequestOutput(page, many=True, context={"request": request}).data)


class RequestDetailApi(APIView):
    permission_classes = [require_scope(ApiKey.Scope.INFERENCE)]

    @extend_schema(
        parameters=[OpenApiParameter("request_id", str, OpenApiParameter.PATH)], responses=RequestDetailOutput
    )
    def get(self, request, request_id: str):
        row = queries.request_get(**_visibility(request), request_id=request_id)
        if row is None:
            raise exceptions.NotFound(f"No request {request_id!r}.")
        return Response(RequestDetailOutput(row, context={"request": request}).data)


class ArtifactContentApi(APIView):
    permission_classes = [require_scope(ApiKey.Scope.INFERENCE)]

    @extend_schema(parameters=[OpenApiParameter("artifact_id", str, OpenApiParameter.PATH)], responses={200: bytes})
    def get(self, request, artifact_id: str):
        artifact = queries.artifact_get(**_visibility(request), artifact_id=artifact_id)
        if artifact is None:
            raise exceptions.NotFound(f"No artifact {artifact_id!r}.")
        try:
            handle = artifact.file.open("rb")
        except (FileNotFoundError, OSError):
            raise exceptions.NotFound("The artifact's file no longer exists.") from None
        filename = artifact.file.name.rsplit("/", 1)[-1]
        return FileResponse(handle, content_type=artifact.mime_type, filename=filename)
