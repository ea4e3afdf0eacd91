"""REST for revisions: PATCH a deployment's config (validated as create validates it, a 400 naming
the field), its revision history, rollback, the pipelines' revisions; who may change what; and the
audit entry every change writes."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from control_plane.accounts.services import api_key_create
from control_plane.audit.models import Action, AuditEntry
from control_plane.deployments.management.commands.sync_pipelines import pipeline_sync
from control_plane.deployments.models import Deployment, DeploymentRevision, Pipeline, RevisionState
from control_plane.deployments.models import DeploymentState as S

SHORT = {"stages": {"echo": {"sampling": {"max_tokens": 3}}}}


def api(user, scopes) -> APIClient:
    _, secret = api_key_create(user=user, name="k", scopes=scopes)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


@pytest.fixture
def owner(pipelines, django_user_model):
    return django_user_model.objects.create_user("owner", password="x", is_staff=True)


@pytest.fixture
def client(owner):
    return api(owner, ["deployments:read", "deployments:write"])


@pytest.fixture
def deployed(client):
    body = {"name": "d1", "pipeline": "echo", "model_dir": "-", "deploy_config": {}}
    assert client.post("/api/deployments/", body, format="json").status_code == 201
    return Deployment.objects.get(name="d1")


def patch(client, deploy_config, name="d1"):
    return client.patch(f"/api/deployments/{name}/", {"deploy_config": deploy_config}, format="json")


@pytest.mark.parametrize(
    ("deploy_config", "field"),
    [
        ({"stages": {"echo": {"pool": "tpu"}}}, "deploy_config.stages.echo.pool"),
        ({"stages": {"echo": {"replicas": 0}}}, "deploy_config.stages.echo.replicas"),
        ({"stages": {"echo": {"device": "cuda:7"}}}, "deploy_config.stages.echo.device"),
        ({"stages": {"nope": {}}}, "deploy_config.stages.nope"),
        ({"stages": {"echo": {"max_batch": "many"}}}, "deploy_config.stages.echo.max_batch"),
        ({"stages": {"echo": {"unknown_knob": 1}}}, "deploy_config.stages.echo"),
        ({"max_queue": 0}, "deploy_config.max_queue"),
        ([1, 2], "deploy_config"),
        ({}, "deploy_config"),  # no change
    ],
)
def test_an_invalid_change_is_a_400_naming_the_field_and_leaves_no_revision(client, deployed, deploy_config, field):
    response = patch(client, deploy_config)
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert list(deployed.revisions.values_list("number", flat=True)) == [1]
    assert not AuditEntry.objects.filter(action=Action.DEPLOYMENT_CHANGE).exists()


def test_a_change_whose_checkpoint_is_gone_names_model_dir(client, owner, tmp_path):
    deployment = Deployment.objects.create(
        name="gone", pipeline=Pipeline.objects.get(name="llm"), model_dir=str(tmp_path / "missing"), created_by=owner
    )
    DeploymentRevision.objects.create(deployment=deployment, number=1, config={}, state=RevisionState.ACTIVE)
    response = patch(client, {"max_queue": 8}, name="gone")
    assert response.status_code == 400 and "model_dir" in response.json(), response.content


def test_a_change_is_a_revision_with_its_diff_its_author_and_an_audit_entry(client, deployed, owner):
    response = patch(client, SHORT)
    assert response.status_code == 202, response.content
    body = response.json()
    # not RUNNING yet: nothing serves, so the change applies at once
    assert body["revision"] == 2 and body["rollout"] == {"number": 2, "state": "ACTIVE", "state_reason": ""}
    assert body["deploy_config"]["stages"]["echo"]["sampling"] == {"max_tokens": 3}
    assert body["deploy_config"]["stages"]["echo"]["replicas"] == 1  # a merge patch: the rest stays

    revisions = client.get("/api/deployments/d1/revisions/").json()
    assert [(r["number"], r["state"]) for r in revisions] == [(2, "ACTIVE"), (1, "SUPERSEDED")]
    assert revisions[0]["diff"] == [{"path": "stages.echo.sampling.max_tokens", "old": None, "new": 3}]
    assert revisions[0]["created_by"] == "owner" and revisions[0]["created_at"]
    entry = AuditEntry.objects.get(action=Action.DEPLOYMENT_CHANGE)
    assert entry.actor == owner and entry.target_name == "d1"
    assert entry.details["revision"] == 2 and entry.details["diff"] == revisions[0]["diff"]

    removed = patch(client, {"stages": {"echo": {"sampling": {"max_tokens": None}}}})  # null removes
    assert removed.status_code == 202 and removed.json()["deploy_config"]["stages"]["echo"]["sampling"] == {}


def test_rollback_restores_an_earlier_config(client, deployed):
    assert patch(client, SHORT).status_code == 202
    response = client.post("/api/deployments/d1/rollback/", {"revision": 1}, format="json")
    assert response.status_code == 202, response.content
    assert response.json()["number"] == 3 and response.json()["rollback_of"] == 1
    deployed.refresh_from_db()
    assert deployed.deploy_config == deployed.revisions.get(number=1).config
    entry = AuditEntry.objects.filter(action=Action.DEPLOYMENT_CHANGE).first()
    assert entry.details["rollback_of"] == 1 and entry.details["revision"] == 3

    missing = client.post("/api/deployments/d1/rollback/", {"revision": 7}, format="json")
    assert missing.status_code == 400 and "revision" in missing.json()
    assert client.post("/api/deployments/d1/rollback/", {}, format="json").status_code == 400


def test_a_change_while_one_rolls_out_is_a_409(client, deployed):
    Deployment.objects.filter(pk=deployed.pk).update(state=S.RUNNING)
    first = patch(client, SHORT)
    assert first.status_code == 202 and first.json()["rollout"]["state"] == "ROLLING"
    assert first.json()["revision"] == 1  # revision 1 serves until the rollout is done
    assert patch(client, {"max_queue": 8}).status_code == 409
    assert client.post("/api/deployments/d1/rollback/", {"revision": 1}, format="json").status_code == 409
    assert client.post("/api/deployments/d1/scale/", {"stage": "echo", "replicas": 2}, format="json").status_code == 409


def test_only_the_creator_and_admins_change_a_deployment(deployed, django_user_model):
    other = django_user_model.objects.create_user("other", password="x", is_staff=True)
    not_mine = api(other, ["deployments:read", "deployments:write"])
    assert not_mine.get("/api/deployments/d1/revisions/").status_code == 200  # everyone may read
    assert patch(not_mine, SHORT).status_code == 403
    assert not_mine.post("/api/deployments/d1/rollback/", {"revision": 1}, format="json").status_code == 403
    reader = api(other, ["deployments:read"])
    assert patch(reader, SHORT).status_code == 403
    anonymous = APIClient()
    assert patch(anonymous, SHORT).status_code in (401, 403)
    plain = django_user_model.objects.create_user("plain", password="x")
    session = APIClient()
    session.force_login(plain)
    assert patch(session, SHORT).status_code == 403
    assert list(deployed.revisions.values_list("number", flat=True)) == [1]

    admin = api(other, ["deployments:read", "deployments:write", "admin"])
    assert patch(admin, SHORT).status_code == 202


def test_pipeline_revisions_follow_the_synced_config(client, pipeline_definitions):
    revisions = client.get("/api/pipelines/echo/revisions/").json()
    assert [r["number"] for r in revisions] == [1]
    (original,) = [item for item in pipeline_definitions if item["name"] == "echo"]
    edited = {**original, "config": {**original["config"], "description": "edited"}}
    pipeline_sync([edited])
    revisions = client.get("/api/pipelines/echo/revisions/").json()
    assert [(r["number"], r["source"]) for r in revisions] == [(2, "sync"), (1, "sync")]
    assert revisions[0]["diff"] == [{"path": "description", "old": original["config"]["description"], "new": "edited"}]
    assert revisions[0]["config"] == edited["config"]
