"""Deployments are everyone's to read and call, but only their creator's (and admins') to change:
another user's `deployments:write` key cannot scale, stop, start or delete them."""

from __future__ import annotations

import json

import pytest
from accounts_helpers import bearer

from control_plane.accounts.services import api_key_create
from control_plane.deployments.management.commands.sync_pipelines import pipeline_sync
from control_plane.deployments.models import Deployment, Pipeline
from control_plane.deployments.services import deployment_create

WRITE = ["deployments:read", "deployments:write"]


@pytest.fixture
def owned(make_user, pipeline_definitions):
    pipeline_sync(pipeline_definitions)
    owner, stranger, admin = make_user("owner"), make_user("stranger"), make_user("boss", superuser=True)
    deployment = deployment_create(
        name="owned", pipeline=Pipeline.objects.get(name="echo"), model_dir="-", deploy_config={}, user=owner
    )
    keys = {
        "owner": api_key_create(user=owner, name="owner", scopes=WRITE)[1],
        "stranger": api_key_create(user=stranger, name="stranger", scopes=WRITE)[1],
        "admin": api_key_create(user=admin, name="admin", scopes=[*WRITE, "admin"])[1],
    }
    return deployment, keys


def changes(name: str):
    return [
        ("post", f"/api/deployments/{name}/scale/", {"stage": "echo", "replicas": 2}),
        ("post", f"/api/deployments/{name}/stop/", {}),
        ("post", f"/api/deployments/{name}/start/", {}),
        ("delete", f"/api/deployments/{name}/", {}),
    ]


def send(secret: str, method: str, path: str, body: dict):
    return getattr(bearer(secret), method)(path, data=json.dumps(body), content_type="application/json")


@pytest.mark.django_db
def test_another_user_can_read_but_not_change_a_deployment(owned):
    deployment, keys = owned
    assert bearer(keys["stranger"]).get("/api/deployments/owned/").status_code == 200
    for method, path, body in changes("owned"):
        response = send(keys["stranger"], method, path, body)
        assert response.status_code == 403, (method, path, response.status_code)
        assert "Only the user who created deployment 'owned'" in response.json()["detail"]
    deployment.refresh_from_db()
    assert deployment.desired_state == "RUNNING"
    assert deployment.replicas.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["owner", "admin"])
def test_the_creator_and_admins_change_it(owned, who):
    _, keys = owned
    statuses = [send(keys[who], method, path, body).status_code for method, path, body in changes("owned")]
    assert statuses == [200, 200, 200, 204]
    assert not Deployment.objects.filter(name="owned").exists()
