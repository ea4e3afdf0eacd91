"""REST for the model registry: list, import from a server path, read, delete (thin views over queries and services)."""

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
from control_plane.registry.imports import ImportInvalid, model_import_local
from control_plane.registry.models import Model
from control_plane.registry.services import ModelInUse, model_delete


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
        path = serializers.CharField(max_length=1000, help_text="A checkpoint directory on the server.")
        name = serializers.CharField(max_length=200, required=False, default="", help_text="Default: the folder name.")
        mode = serializers.ChoiceField(
            ["copy", "link"], default="copy", help_text="Copy the files or symlink the folder."
        )

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

    @extend_schema(request=ImportInput, responses={201: ModelOutput})
    def post(self, request):
        _check_admin(self, request)
        data = self.ImportInput(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            model = model_import_local(
                path=data.validated_data["path"],
                name=data.validated_data["name"],
                link=data.validated_data["mode"] == "link",
                user=request.user,
            )
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
        return Response(status=status.HTTP_204_NO_CONTENT)
