"""The OpenAPI schema describes the accounts routes and key authentication without warnings,
and the permission building blocks behave the same for DRF and plain views."""

from __future__ import annotations

import json

import pytest
import yaml
from django.core.management import call_command
from django.test import RequestFactory
from rest_framework.response import Response
from rest_framework.test import APIRequestFactory
from rest_framework.views import APIView

from control_plane.accounts.decorators import scope_required
from control_plane.accounts.permissions import require_scope


def test_schema_has_the_accounts_routes_and_no_accounts_warnings(tmp_path, capsys):
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--file", str(out), "--validate")
    warnings = [line for line in capsys.readouterr().err.splitlines() if "control_plane/accounts" in line]
    assert warnings == []
    schema = yaml.safe_load(out.read_text())
    assert {"/api/keys/", "/api/keys/{id}/revoke/", "/api/usage/", "/api/usage/export.csv", "/api/quota/"} <= set(
        schema["paths"]
    )
    assert schema["components"]["securitySchemes"]["ApiKeyAuth"]["scheme"] == "bearer"


class DeploymentDetail(APIView):
    permission_classes = [require_scope("deployments:read")]
    deployment_url_kwarg = "name"

    def get(self, request, name):
        return Response({"name": name})


def test_drf_scope_permission_checks_the_deployment_allow_list(make_user, make_key):
    user = make_user()
    _, secret = make_key(user, scopes=["deployments:read"], allowed_deployments=["tiny-llm"])
    view = DeploymentDetail.as_view()
    factory = APIRequestFactory()
    allowed = view(factory.get("/x", HTTP_AUTHORIZATION=f"Bearer {secret}"), name="tiny-llm")
    refused = view(factory.get("/x", HTTP_AUTHORIZATION=f"Bearer {secret}"), name="sd3")
    assert allowed.status_code == 200 and refused.status_code == 403


@scope_required("inference", deployment_kwarg="deployment")
def sync_view(request, deployment):
    from django.http import JsonResponse

    return JsonResponse({"user": request.user.username})


@scope_required("inference")
async def async_view(request):
    from django.http import JsonResponse

    return JsonResponse({"ok": True})


def error_of(response) -> dict:
    return json.loads(response.content)["error"]


def test_plain_view_decorator_answers_in_openai_shape(make_user, make_key):
    user = make_user()
    _, secret = make_key(user, scopes=["inference"], allowed_deployments=["tiny-llm"])
    _, unscoped = make_key(user, scopes=["deployments:read"])
    factory = RequestFactory()
    ok = sync_view(factory.post("/v1/x", HTTP_AUTHORIZATION=f"Bearer {secret}"), deployment="tiny-llm")
    assert ok.status_code == 200 and json.loads(ok.content) == {"user": user.username}
    outside = sync_view(factory.post("/v1/x", HTTP_AUTHORIZATION=f"Bearer {secret}"), deployment="sd3")
    assert outside.status_code == 403 and error_of(outside)["type"] == "permission_error"
    anonymous = factory.post("/v1/x")
    anonymous.user = __import__("django.contrib.auth.models", fromlist=["AnonymousUser"]).AnonymousUser()
    refused = sync_view(anonymous, deployment="tiny-llm")
    assert refused.status_code == 401 and refused["WWW-Authenticate"] == "Bearer"
    assert set(error_of(refused)) == {"message", "type", "param", "code"}
    assert error_of(refused)["code"] == "invalid_api_key"
    assert sync_view(factory.get("/v1/x", HTTP_AUTHORIZATION=f"Bearer {unscoped}"), deployment="a").status_code == 403


@pytest.fixture
def inference_secret(transactional_db, make_user, make_key) -> str:
    return make_key(make_user(), scopes=["inference"])[1]


async def test_async_plain_view_decorator(inference_secret):
    from asgiref.sync import sync_to_async
    from django.db import connections

    factory = RequestFactory()
    try:
        ok = await async_view(factory.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {inference_secret}"))
        assert ok.status_code == 200
        assert (await async_view(factory.get("/v1/models", HTTP_AUTHORIZATION="Bearer omni-x-y"))).status_code == 401
    finally:
        await sync_to_async(connections.close_all)()  # the ORM thread's connection
