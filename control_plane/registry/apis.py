"""REST for the model registry: list, read, delete (thin views over queries and services)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from control_plane.accounts.models import ApiKey
from control_plane.accounts.permissions import is_admin
from control_plane.deployments.permissions import CanReadDeployments, CanWriteDeployments
from control_plane.registry import queries
from control_plane.registry.models import Model
from control_plane.registry.services import ModelInUse, model_delete


class ModelOutput(serializers.ModelSerializer):
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
            "created_at",
            "updated_at",
        ]


class ModelListApi(APIView):
    permission_classes = [CanReadDeployments]

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


class ModelDetailApi(APIView):
    def get_permissions(self):
        return [CanWriteDeployments() if self.request.method == "DELETE" else CanReadDeployments()]

    @extend_schema(responses=ModelOutput)
    def get(self, request, name: str):
        return Response(ModelOutput(get_object_or_404(Model, name=name)).data)

    @extend_schema(responses={204: None, 409: None})
    def delete(self, request, name: str):
        model = get_object_or_404(Model, name=name)
        api_key = request.auth if isinstance(request.auth, ApiKey) else None
        if not is_admin(request.user, api_key):
            self.permission_denied(request, message="Deleting a model needs an admin.")
        try:
            model_delete(model=model)
        except ModelInUse as error:
            return Response({"detail": str(error), "deployments": error.deployments}, status=status.HTTP_409_CONFLICT)
        return Response(status=status.HTTP_204_NO_CONTENT)
