"""A deployment stopped on purpose answers as OpenAI does for a model that is not available (404
`model_not_found`, no Retry-After: clients do not retry); one that is not RUNNING yet answers 503
with Retry-After."""

from __future__ import annotations

import pytest
from django.test import Client

from control_plane.accounts.services import api_key_create
from control_plane.deployments.management.commands.sync_pipelines import discover_pipelines, pipeline_sync
from control_plane.deployments.models import Deployment, DeploymentState, Pipeline
from control_plane.deployments.services import deployment_create, deployment_stop

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = {"model": "dep", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def deployment_and_key(django_user_model):
    pipeline_sync(discover_pipelines())
    user = django_user_model.objects.create_user("caller", password="x")
    _, secret = api_key_create(user=user, name="k", scopes=["inference"])
    deployment = deployment_create(name="dep", pipeline=Pipeline.objects.get(name="echo"), model_dir="-",
                                   deploy_config={})  # fmt: skip
    return deployment, secret


def chat(secret: str):
    return Client().post("/v1/chat/completions", CHAT, content_type="application/json",
                         HTTP_AUTHORIZATION=f"Bearer {secret}")  # fmt: skip


def test_a_stopped_deployment_is_a_404_without_retry_after(deployment_and_key):
    deployment, secret = deployment_and_key
    deployment_stop(deployment=deployment)
    for state in (DeploymentState.DRAINING, DeploymentState.STOPPED):
        Deployment.objects.filter(pk=deployment.pk).update(state=state)
        response = chat(secret)
        assert response.status_code == 404, response.content
        assert response.json()["error"]["code"] == "model_not_found"
        assert "stopped" in response.json()["error"]["message"]
        assert "Retry-After" not in response


def test_a_deployment_not_running_yet_is_a_503_with_retry_after(deployment_and_key):
    deployment, secret = deployment_and_key
    for state in (DeploymentState.PENDING, DeploymentState.LOADING, DeploymentState.ERROR):
        Deployment.objects.filter(pk=deployment.pk).update(state=state)
        response = chat(secret)
        assert response.status_code == 503, response.content
        assert response.json()["error"]["code"] == "model_not_ready"
        assert int(response["Retry-After"]) >= 1
