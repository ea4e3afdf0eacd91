"""A deployment's model_dir lies inside the model roots: `..`, absolute paths elsewhere and
symlinks that leave a root are refused with a 400 naming `model_dir`; loader errors are shown
to users who are not staff without their paths."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from control_plane.accounts.services import api_key_create
from control_plane.deployments.management.commands.sync_pipelines import discover_pipelines, pipeline_sync
from control_plane.deployments.models import Deployment, DeploymentState, Replica


@pytest.fixture
def models_dir(settings, tmp_path):
    root = tmp_path / "models"
    (root / "tiny").mkdir(parents=True)
    (root / "org" / "model").mkdir(parents=True)
    (root / "escape").symlink_to("/etc")
    (root / "tiny" / "deeper-escape").symlink_to(tmp_path / "outside")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "config.json").write_text("{}")
    (root / "linked").symlink_to(tmp_path / "outside")  # an admin's import by link
    settings.MODELS_DIR = root
    settings.MODEL_DIR_ROOTS = [tmp_path / "extra"]
    (tmp_path / "extra" / "ckpt").mkdir(parents=True)
    return root


def writer(django_user_model, *, staff: bool) -> APIClient:
    name = "staff" if staff else "writer"
    user = django_user_model.objects.create_user(name, password="x", is_staff=staff)
    _, secret = api_key_create(user=user, name="k", scopes=["deployments:read", "deployments:write"])
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return api


@pytest.fixture
def client(db, django_user_model, models_dir):
    pipeline_sync(discover_pipelines())
    return writer(django_user_model, staff=False)


def create(client, name: str, model_dir: str):
    body = {"name": name, "pipeline": "echo", "model_dir": model_dir, "deploy_config": {}}
    return client.post("/api/deployments/", body, format="json")


@pytest.mark.parametrize(
    "model_dir",
    [
        "/etc",
        "/",
        "../../etc",
        "tiny/../../../etc",
        "/tmp",
        "escape",
        "escape/passwd",
        "org/../../x",
        "\x00",
        "",
        "tiny/deeper-escape",
        "linked/../escape",
    ],
)
def test_paths_outside_the_model_roots_are_refused(client, model_dir):
    response = create(client, "bad", model_dir)
    assert response.status_code == 400, (model_dir, response.content)
    assert "model_dir" in response.content.decode()
    assert not Deployment.objects.filter(name="bad").exists()


def test_checkpoints_inside_the_roots_are_accepted(client, models_dir, tmp_path):
    accepted = {
        "a": ("tiny", models_dir / "tiny"),
        "b": ("org/model", models_dir / "org" / "model"),
        "c": (str(models_dir / "tiny"), models_dir / "tiny"),
        "d": (str(tmp_path / "extra" / "ckpt"), tmp_path / "extra" / "ckpt"),
        "e": ("-", "-"),
        "f": ("linked", models_dir / "linked"),
    }
    for name, (given, stored) in accepted.items():
        response = create(client, name, given)
        assert response.status_code == 201, (given, response.content)
        assert response.json()["model_dir"] == str(stored)


def test_loader_errors_lose_their_paths_for_users_who_are_not_staff(client, django_user_model):
    assert create(client, "broken", "tiny").status_code == 201
    reason = "could not load /srv/secret/weights.safetensors: [Errno 13] Permission denied: '/srv/secret'"
    Deployment.objects.filter(name="broken").update(state=DeploymentState.ERROR, state_reason=reason)
    Replica.objects.filter(deployment__name="broken").update(state_reason=reason, last_error=reason)

    shown = client.get("/api/deployments/broken/").json()
    for text in (shown["state_reason"], shown["replicas"][0]["state_reason"], shown["replicas"][0]["last_error"]):
        assert "/srv" not in text and "<path>" in text and "Permission denied" in text
    listed = client.get("/api/replicas/", {"deployment": "broken"}).json()
    assert all("/srv" not in replica["last_error"] for replica in listed)

    staff = writer(django_user_model, staff=True).get("/api/deployments/broken/").json()
    assert staff["state_reason"] == reason
