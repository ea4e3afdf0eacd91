"""REST for revisions: change a deployment's config (PATCH on the deployment, in apis.py), list a
deployment's or a pipeline's revisions, roll a deployment back to an earlier revision."""

from __future__ import annotations

from django.db import transaction
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from control_plane.accounts.models import ApiKey
from control_plane.audit.models import Action
from control_plane.audit.services import audit_record
from control_plane.deployments import queries
from control_plane.deployments.models import Deployment, DeploymentRevision, Pipeline
from control_plane.deployments.permissions import (
    CanReadDeployments,
    CanWriteDeployments,
    check_may_manage,
    may_manage,
)
from control_plane.deployments.revisions import DeploymentBusy, deployment_rollback
from control_plane.deployments.services import DeploymentInvalid


class RevisionOutput(serializers.Serializer):
    number = serializers.IntegerField()
    state = serializers.CharField(help_text="ROLLING, ACTIVE (serving), SUPERSEDED or FAILED.")
    state_reason = serializers.CharField()
    config = serializers.JSONField(help_text="The whole DeployConfig of this revision.")
    diff = serializers.JSONField(help_text="[{path, old, new}] against the previous revision.")
    rollback_of = serializers.IntegerField(allow_null=True)
    created_by = serializers.SerializerMethodField(help_text="Who made it: shown to the deployment's managers only.")
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)

    def get_created_by(self, revision) -> str | None:
        if not self.context.get("show_authors") or revision.created_by is None:
            return None
        return revision.created_by.username


class PipelineRevisionOutput(serializers.Serializer):
    number = serializers.IntegerField()
    config = serializers.JSONField()
    diff = serializers.JSONField()
    source = serializers.CharField()
    created_at = serializers.DateTimeField()


BUSY = OpenApiResponse(OpenApiTypes.OBJECT, description="An earlier revision still rolls out (`detail` says which).")


class RolloutOutput(serializers.Serializer):
    number = serializers.IntegerField()
    state = serializers.CharField()
    state_reason = serializers.CharField()


def invalid(error: DeploymentInvalid) -> ValidationError:
    return ValidationError({error.field: [error.message]})


def busy(error: DeploymentBusy) -> Response:
    return Response({"detail": str(error)}, status=status.HTTP_409_CONFLICT)


def change_audited(request, deployment: Deployment, revision: DeploymentRevision) -> None:
    details = {"revision": revision.number, "diff": revision.diff}
    if revision.rollback_of is not None:
        details["rollback_of"] = revision.rollback_of
    audit_record(request, Action.DEPLOYMENT_CHANGE, deployment, details)


class DeploymentRevisionListApi(APIView):
    deployment_url_kwarg = "name"  # a key's deployment allow-list applies to this URL
    permission_classes = [CanReadDeployments]

    @extend_schema(responses=RevisionOutput(many=True))
    def get(self, request, name: str):
        deployment = get_object_or_404(Deployment, name=name)
        revisions = deployment.revisions.select_related("created_by").order_by("-number")
        api_key = request.auth if isinstance(request.auth, ApiKey) else None
        context = {"show_authors": may_manage(request.user, api_key, deployment)}
        return Response(RevisionOutput(revisions, many=True, context=context).data)


class DeploymentRollbackApi(APIView):
    deployment_url_kwarg = "name"  # a key's deployment allow-list applies to this URL
    permission_classes = [CanWriteDeployments]

    class RollbackInput(serializers.Serializer):
        revision = serializers.IntegerField(min_value=1, help_text="The earlier revision whose config to restore.")

    @extend_schema(request=RollbackInput, responses={202: RevisionOutput, 409: BUSY})
    @transaction.atomic
    def post(self, request, name: str):
        data = self.RollbackInput(data=request.data)
        data.is_valid(raise_exception=True)
        deployment = get_object_or_404(queries.deployment_list(), name=name)
        check_may_manage(request, deployment)
        try:
            revision = deployment_rollback(
                deployment=deployment, number=data.validated_data["revision"], user=request.user
            )
        except DeploymentInvalid as error:
            raise invalid(error) from None
        except DeploymentBusy as error:
            return busy(error)
        change_audited(request, deployment, revision)
        return Response(RevisionOutput(revision).data, status=status.HTTP_202_ACCEPTED)


class PipelineRevisionListApi(APIView):
    permission_classes = [CanReadDeployments]

    @extend_schema(responses=PipelineRevisionOutput(many=True))
    def get(self, request, name: str):
        pipeline = get_object_or_404(Pipeline, name=name)
        return Response(PipelineRevisionOutput(pipeline.revisions.order_by("-number"), many=True).data)
