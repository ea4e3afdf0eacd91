"""REST for pipelines, deployments and replicas (thin views over services and queries)."""

from __future__ import annotations

from django.db import transaction
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from control_plane.audit.models import Action
from control_plane.audit.services import audit_record
from control_plane.deployments import queries
from control_plane.deployments.config_diff import merge_patch
from control_plane.deployments.model_paths import redact_paths, resolve_model_dir
from control_plane.deployments.models import Deployment, Pipeline
from control_plane.deployments.permissions import CanReadDeployments, CanWriteDeployments, check_may_manage
from control_plane.deployments.revision_apis import BUSY, RolloutOutput, busy, change_audited
from control_plane.deployments.revisions import DeploymentBusy, deployment_change
from control_plane.deployments.services import (
    DeploymentInvalid,
    deployment_create,
    deployment_delete,
    deployment_scale,
    deployment_start,
    deployment_stop,
)


class PipelineOutput(serializers.ModelSerializer):
    class Meta:
        model = Pipeline
        fields = ["name", "family", "variant", "description", "config", "version"]


class ReasonField(serializers.CharField):
    """A state reason or loader error: in full for staff, with paths redacted for everyone else."""

    def to_representation(self, value):
        text = super().to_representation(value)
        request = self.context.get("request")
        user = getattr(request, "user", None)
        return text if user is not None and user.is_staff else redact_paths(text)


class ReplicaOutput(serializers.Serializer):
    id = serializers.UUIDField()
    deployment = serializers.CharField(source="deployment.name")
    stage = serializers.CharField()
    group = serializers.CharField()
    members = serializers.ListField(child=serializers.CharField())
    index = serializers.IntegerField()
    pool = serializers.CharField()
    device = serializers.CharField()
    host = serializers.CharField()
    state = serializers.CharField()
    state_reason = ReasonField()
    progress = serializers.FloatField()
    weights_loaded_bytes = serializers.IntegerField(
        allow_null=True, help_text="Bytes of weights its host has read (null: not counted, e.g. not loading yet)."
    )
    weights_total_bytes = serializers.IntegerField(
        allow_null=True, help_text="Bytes of weights its host reads in all: `progress` is loaded / total meanwhile."
    )
    queue_depth = serializers.IntegerField()
    last_heartbeat = serializers.DateTimeField()
    restarts = serializers.IntegerField()
    last_error = ReasonField()
    transfers = serializers.JSONField(
        help_text="Connector totals its host reported (`shm.put`, `redis.get` …): count, bytes, seconds."
    )


class DeploymentOutput(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    pipeline = serializers.CharField(source="pipeline.name")
    model_dir = serializers.CharField()
    deploy_config = serializers.JSONField()
    desired_state = serializers.CharField()
    state = serializers.CharField()
    state_reason = ReasonField()
    state_changed_at = serializers.DateTimeField()
    created_at = serializers.DateTimeField()
    revision = serializers.IntegerField(help_text="The revision serving (`deploy_config` is its config).")
    rollout = serializers.SerializerMethodField(help_text="The latest revision: its number, state and reason.")
    replicas = ReplicaOutput(many=True)

    @extend_schema_field(RolloutOutput(allow_null=True))
    def get_rollout(self, deployment) -> dict | None:
        latest = deployment.revisions.order_by("-number").values("number", "state", "state_reason").first()
        return latest


def _invalid(error: DeploymentInvalid) -> ValidationError:
    return ValidationError({error.field: [error.message]})


class PipelineListApi(APIView):
    permission_classes = [CanReadDeployments]

    @extend_schema(responses=PipelineOutput(many=True))
    def get(self, request):
        return Response(PipelineOutput(queries.pipeline_list(), many=True).data)


class PipelineDetailApi(APIView):
    permission_classes = [CanReadDeployments]

    @extend_schema(responses=PipelineOutput)
    def get(self, request, name: str):
        return Response(PipelineOutput(get_object_or_404(Pipeline, name=name)).data)


class DeploymentListApi(APIView):
    class DeploymentCreateInput(serializers.Serializer):
        name = serializers.SlugField(max_length=100)
        pipeline = serializers.SlugField(max_length=100)
        model_dir = serializers.CharField(max_length=500)
        deploy_config = serializers.JSONField(required=False, default=dict)

    def get_permissions(self):
        return [CanWriteDeployments() if self.request.method == "POST" else CanReadDeployments()]

    @extend_schema(responses=DeploymentOutput(many=True))
    def get(self, request):
        return Response(DeploymentOutput(queries.deployment_list(), many=True, context={"request": request}).data)

    @extend_schema(request=DeploymentCreateInput, responses={201: DeploymentOutput})
    @transaction.atomic
    def post(self, request):
        data = self.DeploymentCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        pipeline = Pipeline.objects.filter(name=data.validated_data["pipeline"]).first()
        if pipeline is None:
            raise ValidationError({"pipeline": [f"unknown pipeline {data.validated_data['pipeline']!r}"]})
        if not isinstance(data.validated_data["deploy_config"], dict):
            raise ValidationError({"deploy_config": ["must be a JSON object"]})
        try:
            deployment = deployment_create(
                name=data.validated_data["name"],
                pipeline=pipeline,
                model_dir=resolve_model_dir(data.validated_data["model_dir"]),
                deploy_config=data.validated_data["deploy_config"],
                user=request.user,
            )
        except DeploymentInvalid as error:
            raise _invalid(error) from None
        audit_record(request, Action.DEPLOYMENT_CREATE, deployment, data.validated_data)
        return Response(
            DeploymentOutput(queries.deployment_get(deployment.name), context={"request": request}).data,
            status=status.HTTP_201_CREATED,
        )


class DeploymentDetailApi(APIView):
    deployment_url_kwarg = "name"  # a key's deployment allow-list applies to this URL

    class DeploymentChangeInput(serializers.Serializer):
        deploy_config = serializers.JSONField(
            help_text="A JSON merge patch (RFC 7386) onto the current DeployConfig: objects merge, null removes."
        )

    def get_permissions(self):
        return [CanWriteDeployments() if self.request.method in ("DELETE", "PATCH") else CanReadDeployments()]

    @extend_schema(request=DeploymentChangeInput, responses={202: DeploymentOutput, 409: BUSY})
    @transaction.atomic
    def patch(self, request, name: str):
        data = self.DeploymentChangeInput(data=request.data)
        data.is_valid(raise_exception=True)
        patch = data.validated_data["deploy_config"]
        if not isinstance(patch, dict):
            raise ValidationError({"deploy_config": ["must be a JSON object"]})
        deployment = _managed_deployment(request, name)
        try:
            revision = deployment_change(
                deployment=deployment, deploy_config=merge_patch(deployment.deploy_config, patch), user=request.user
            )
        except DeploymentInvalid as error:
            raise _invalid(error) from None
        except DeploymentBusy as error:
            return busy(error)
        change_audited(request, deployment, revision)
        return Response(
            DeploymentOutput(queries.deployment_get(name), context={"request": request}).data,
            status=status.HTTP_202_ACCEPTED,
        )

    @extend_schema(responses=DeploymentOutput)
    def get(self, request, name: str):
        return Response(DeploymentOutput(_deployment(name), context={"request": request}).data)

    @extend_schema(responses={204: None})
    @transaction.atomic
    def delete(self, request, name: str):
        deployment = _managed_deployment(request, name)
        audit_record(request, Action.DEPLOYMENT_DELETE, deployment)  # while it still has its id
        deployment_delete(deployment=deployment)
        return Response(status=status.HTTP_204_NO_CONTENT)


class DeploymentScaleApi(APIView):
    deployment_url_kwarg = "name"  # a key's deployment allow-list applies to this URL

    permission_classes = [CanWriteDeployments]

    class DeploymentScaleInput(serializers.Serializer):
        stage = serializers.CharField(max_length=64)
        replicas = serializers.IntegerField()

    @extend_schema(request=DeploymentScaleInput, responses={200: DeploymentOutput, 409: BUSY})
    @transaction.atomic
    def post(self, request, name: str):
        data = self.DeploymentScaleInput(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            deployment = deployment_scale(
                deployment=_managed_deployment(request, name), user=request.user, **data.validated_data
            )
        except DeploymentInvalid as error:
            raise _invalid(error) from None
        except DeploymentBusy as error:
            return busy(error)
        audit_record(request, Action.DEPLOYMENT_SCALE, deployment, data.validated_data)
        return Response(DeploymentOutput(queries.deployment_get(deployment.name), context={"request": request}).data)


class DeploymentStopApi(APIView):
    deployment_url_kwarg = "name"  # a key's deployment allow-list applies to this URL

    permission_classes = [CanWriteDeployments]

    @extend_schema(request=None, responses=DeploymentOutput)
    @transaction.atomic
    def post(self, request, name: str):
        deployment = deployment_stop(deployment=_managed_deployment(request, name))
        audit_record(request, Action.DEPLOYMENT_STOP, deployment)
        return Response(DeploymentOutput(queries.deployment_get(deployment.name), context={"request": request}).data)


class DeploymentStartApi(APIView):
    deployment_url_kwarg = "name"  # a key's deployment allow-list applies to this URL

    permission_classes = [CanWriteDeployments]

    @extend_schema(request=None, responses=DeploymentOutput)
    @transaction.atomic
    def post(self, request, name: str):
        deployment = deployment_start(deployment=_managed_deployment(request, name))
        audit_record(request, Action.DEPLOYMENT_START, deployment)
        return Response(DeploymentOutput(queries.deployment_get(deployment.name), context={"request": request}).data)


class ReplicaListApi(APIView):
    permission_classes = [CanReadDeployments]

    @extend_schema(responses=ReplicaOutput(many=True))
    def get(self, request):
        replicas = queries.replica_list(deployment=request.query_params.get("deployment"))
        return Response(ReplicaOutput(replicas, many=True, context={"request": request}).data)


def _deployment(name: str) -> Deployment:
    return get_object_or_404(queries.deployment_list(), name=name)


def _managed_deployment(request, name: str) -> Deployment:
    deployment = _deployment(name)
    check_may_manage(request, deployment)
    return deployment
