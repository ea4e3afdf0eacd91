"""Deploys that cannot work are refused at create time with a 400 naming the field: a checkpoint
that does not exist, a directory without a config, an architecture the family does not serve, a
backend the stage kind cannot run, a hub id (no hub is reachable). The console's deploy form shows
the same error on its field."""

from __future__ import annotations

import pytest
from django.urls import reverse
from procs import REPO
from rest_framework.test import APIClient

from control_plane.accounts.services import api_key_create
from control_plane.deployments.models import Deployment

MODELS = REPO / "var" / "models"


@pytest.fixture
def client(pipelines, django_user_model):
    user = django_user_model.objects.create_user("ops", password="x", is_staff=True)
    _, secret = api_key_create(user=user, name="k", scopes=["deployments:read", "deployments:write"])
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return api


def create(client, pipeline: str, model_dir: str, deploy_config: dict | None = None):
    body = {"name": "d1", "pipeline": pipeline, "model_dir": model_dir, "deploy_config": deploy_config or {}}
    return client.post("/api/deployments/", body, format="json")


@pytest.mark.django_db
def test_a_checkpoint_that_cannot_serve_is_refused_naming_model_dir(
    client, tmp_path, monkeypatch, settings, repo_tiny_models
):
    settings.MODEL_DIR_ROOTS = [tmp_path, MODELS]  # checkpoints may live under these
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for pipeline, model_dir, says in [
        ("llm", str(tmp_path / "missing"), "no checkpoint directory"),
        ("llm", str(tmp_path / "empty"), "neither config.json nor model_index.json"),
        ("llm", str(tmp_path / "broken"), "not valid JSON"),
        ("llm", str(MODELS / "qwen2_5_omni"), "the llm family serves"),
        ("qwen2_5_omni", str(MODELS / "qwen2"), "'qwen2' checkpoint"),
        ("llm", "Qwen/Qwen2.5-0.5B-Instruct", "no checkpoint directory"),  # no hub: a name under the models dir
    ]:
        response = create(client, pipeline, model_dir)
        assert response.status_code == 400, (model_dir, response.content)
        assert says in response.json()["model_dir"][0], response.json()
    assert not Deployment.objects.exists()
    assert create(client, "llm", str(MODELS / "qwen2")).status_code == 201


@pytest.mark.django_db
def test_a_backend_the_stage_kind_cannot_run_is_refused(client):
    response = create(client, "llm", str(MODELS / "qwen2"), {"stages": {"llm": {"backend": "diffusers"}}})
    assert response.status_code == 400
    assert "ar stage cannot run on 'diffusers'" in response.json()["deploy_config.stages.llm.backend"][0]


@pytest.mark.django_db
def test_the_deploy_form_shows_the_checkpoint_error_on_its_field(pipelines, django_user_model, client):
    root = django_user_model.objects.create_superuser("root", password="x")
    from django.test import Client

    browser = Client()
    browser.force_login(root)
    url = reverse("console:deploy", args=["llm"])
    data = {"name": "nope", "model_dir": "no-such-checkpoint", "max_queue": "64", "request_timeout_s": "300",
            "stages.llm.pool": "cpu", "stages.llm.replicas": "1", "stages.llm.device": "cpu",
            "stages.llm.backend": "torch", "stages.llm.max_batch": "16", "stages.llm.max_length": "2048",
            "stages.llm.dtype": "float32", "stages.llm.async_chunk_size": "25", "stages.llm.options": "{}"}  # fmt: skip
    page = browser.post(url, data).content.decode()
    assert "no checkpoint directory at" in page and "no-such-checkpoint" in page
    assert not Deployment.objects.filter(name="nope").exists()
