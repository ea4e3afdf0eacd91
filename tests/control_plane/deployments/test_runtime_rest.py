"""REST for pipelines and deployments: validation errors name the field."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from control_plane.accounts.services import api_key_create
from control_plane.deployments.models import Deployment, Replica


@pytest.fixture
def client(pipelines, django_user_model):
    user = django_user_model.objects.create_user("ops", password="x", is_staff=True)
    _, secret = api_key_create(user=user, name="k", scopes=["deployments:read", "deployments:write"])
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return api


def create(client, **overrides):
    body = {"name": "d1", "pipeline": "echo", "model_dir": "-", "deploy_config": {}, **overrides}
    return client.post("/api/deployments/", body, format="json")


def test_pipelines_are_listed_with_their_stage_graph(client):
    names = {p["name"] for p in client.get("/api/pipelines/").json()}
    assert {"llm", "echo", "echo-chain"} <= names
    chain = client.get("/api/pipelines/echo-chain/").json()
    assert [s["name"] for s in chain["config"]["stages"]] == ["echo", "echo2"]


@pytest.mark.parametrize(
    ("deploy_config", "field"),
    [
        ({"stages": {"echo": {"pool": "tpu"}}}, "deploy_config.stages.echo.pool"),
        ({"stages": {"echo": {"pools": ["cpu", "tpu"]}}}, "deploy_config.stages.echo.pools.1"),
        ({"stages": {"echo": {"replicas": 0}}}, "deploy_config.stages.echo.replicas"),
        ({"stages": {"echo": {"device": "cuda:7"}}}, "deploy_config.stages.echo.device"),
        ({"stages": {"echo": {"device": "tpu"}}}, "deploy_config.stages.echo.device"),
        ({"stages": {"nope": {}}}, "deploy_config.stages.nope"),
        ({"stages": {"echo": {"max_batch": "many"}}}, "deploy_config.stages.echo.max_batch"),
        ({"stages": {"echo": {"load_format": "pt"}}}, "deploy_config.stages.echo.load_format"),
        ({"stages": {"echo": {"unknown_knob": 1}}}, "deploy_config.stages.echo"),
    ],
)
def test_an_invalid_deploy_config_is_a_400_naming_the_field(client, deploy_config, field):
    response = create(client, deploy_config=deploy_config)
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert not Deployment.objects.exists()


def test_unknown_pipeline_and_duplicate_name_are_400(client):
    assert "pipeline" in create(client, pipeline="nope").json()
    assert create(client).status_code == 201
    assert "name" in create(client).json()


def test_create_scale_stop_and_delete(client):
    body = create(client, pipeline="echo-chain", deploy_config={"stages": {"echo2": {"replicas": 2}}}).json()
    assert body["state"] == "PENDING"
    assert sorted((r["stage"], r["index"]) for r in body["replicas"]) == [("echo", 0), ("echo2", 0), ("echo2", 1)]

    scaled = client.post("/api/deployments/d1/scale/", {"stage": "echo", "replicas": 3}, format="json").json()
    assert len([r for r in scaled["replicas"] if r["stage"] == "echo"]) == 3
    down = client.post("/api/deployments/d1/scale/", {"stage": "echo2", "replicas": 1}, format="json").json()
    assert [r["state"] for r in down["replicas"] if r["stage"] == "echo2"] == ["PENDING", "DRAINING"]
    bad = client.post("/api/deployments/d1/scale/", {"stage": "echo", "replicas": 0}, format="json")
    assert bad.status_code == 400 and "replicas" in bad.json()

    assert client.post("/api/deployments/d1/stop/").json()["desired_state"] == "STOPPED"
    assert client.get("/api/replicas/?deployment=d1").status_code == 200
    assert client.delete("/api/deployments/d1/").status_code == 204
    assert not Replica.objects.exists()


def test_reads_need_a_key_with_the_scope(client, django_user_model):
    user = django_user_model.objects.create_user("reader", password="x")
    _, secret = api_key_create(user=user, name="r", scopes=["inference"])
    other = APIClient()
    assert other.get("/api/deployments/").status_code in (401, 403)
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert other.get("/api/deployments/").status_code == 403
    assert create(other).status_code == 403
