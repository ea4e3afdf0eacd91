"""REST for the model registry: list, import (a server path, a hub repository, an uploaded archive),
read, delete (thin views over queries and services)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from control_plane.accounts.models import ApiKey
from control_plane.accounts.permissions import is_admin
from control_plane.deployments.permissions import CanReadDeployments, CanWriteDeployments
from control_plane.registry import queries
from control_plane.registry.archive_import import model_import_archive
from control_plane.registry.hub_import import model_import_hub
from control_plane.registry.imports import ImportInvalid, model_import_local
from control_plane.registry.models import Model
from control_plane.registry.services import ModelImporting, ModelInUse, model_delete


class ModelOutput(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", default=None)

    class Meta:
        model = Model
        fields = [
            "name",
            "path",
            "family",
            "architecture",
            "size_bytes",
            "parameter_count",
            "dtype",
            "source",
            "random_weights",
            "status",
            "status_reason",
            "hub_repo",
            "hub_revision",
            "bytes_done",
            "bytes_total",
            "files_done",
            "files_total",
            "created_by",
            "created_at",
            "updated_at",
        ]


def _check_admin(view, request) -> None:
    api_key = request.auth if isinstance(request.auth, ApiKey) else None
    if not is_admin(request.user, api_key):
        view.permission_denied(request, message="Importing or deleting a model needs an admin.")


class ModelListApi(APIView):
    class ImportInput(serializers.Serializer):
        path = serializers.CharField(max_length=1000, required=False, help_text="A checkpoint directory on the server.")
        hub = serializers.CharField(
            max_length=200, required=False, help_text="A Hugging Face hub repository id: downloaded in the background."
        )
        revision = serializers.CharField(max_length=200, required=False, default="main", help_text="With `hub`.")
        archive = serializers.FileField(required=False, help_text="A tar or zip of a checkpoint directory (multipart).")
        name = serializers.CharField(
            max_length=200, required=False, default="", help_text="Default: the folder, repository or archive name."
        )
        mode = serializers.ChoiceField(
            ["copy", "link"], default="copy", help_text="With `path`: copy the files or symlink the folder."
        )

        def validate(self, attrs):
            given = [source for source in ("path", "hub", "archive") if attrs.get(source)]
            if len(given) != 1:
                raise ValidationError({"path": ["give one of path, hub or archive"]})
            return attrs

    def get_permissions(self):
        return [CanWriteDeployments() if self.request.method == "POST" else CanReadDeployments()]

    @extend_schema(
        parameters=[
            OpenApiParameter("search", str, description="Part of the name, architecture or source."),
            OpenApiParameter("family", str, description="Only models this family serves."),
        ],
        responses=ModelOutput(many=True),
    )
    def get(self, request):
        models = queries.model_list(
            search=request.query_params.get("search", ""), family=request.query_params.get("family", "")
        )
        return Response(ModelOutput(models, many=True).data)

    @extend_schema(request=ImportInput, responses={201: ModelOutput, 202: ModelOutput})
    def post(self, request):
        _check_admin(self, request)
        data = self.ImportInput(data=request.data)
        data.is_valid(raise_exception=True)
        given, name = data.validated_data, data.validated_data["name"]
        try:
            if given.get("hub"):
                model = model_import_hub(repo_id=given["hub"], revision=given["revision"], name=name, user=request.user)
                return Response(ModelOutput(model).data, status=status.HTTP_202_ACCEPTED)
            if given.get("archive"):
                model = model_import_archive(upload=given["archive"], name=name, user=request.user)
            else:
                model = model_import_local(path=given["path"], name=name, link=given["mode"] == "link",
                                           user=request.user)  # fmt: skip
        except ImportInvalid as error:
            raise ValidationError({error.field: [error.message]}) from None
        return Response(ModelOutput(model).data, status=status.HTTP_201_CREATED)


class ModelDetailApi(APIView):
    def get_permissions(self):
        return [CanWriteDeployments() if self.request.method == "DELETE" else CanReadDeployments()]

    @extend_schema(responses=ModelOutput)
    def get(self, request, name: str):
        return Response(ModelOutput(get_object_or_404(Model, name=name)).data)

    @extend_schema(responses={204: None, 409: None})
    def delete(self, request, name: str):
        model = get_object_or_404(Model, name=name)
        _check_admin(self, request)
        try:
            model_delete(model=model)
        except ModelInUse as error:
            return Response({"detail": str(error), "deployments": error.deployments}, status=status.HTTP_409_CONFLICT)
        except ModelImporting as error:
            return Response({"detail": str(error), "deployments": []}, status=status.HTTP_409_CONFLICT)
        return Response(status=status.HTTP_204_NO_CONTENT)
