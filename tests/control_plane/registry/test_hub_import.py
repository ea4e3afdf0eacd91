"""Importing from the Hugging Face hub by repository id, against a local stand-in of the hub
(hub_server.py) serving the tiny qwen2 checkpoint: the import runs in a process of its own,
records its progress on the row, resumes, fails with a reason, and lists nothing half-downloaded."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone
from hub_server import HubServer, repo_files
from procs import free_port, wait_for
from rest_framework.test import APIClient

from control_plane.accounts.services import api_key_create
from control_plane.registry.models import Model

pytestmark = pytest.mark.django_db(transaction=True)
REPO_ID = "tiny/qwen2"


@pytest.fixture
def models_dir(tmp_path, settings):
    settings.MODELS_DIR = tmp_path / "models"
    settings.MODELS_DIR.mkdir()
    return settings.MODELS_DIR


@pytest.fixture
def served(repo_tiny_models, tmp_path):
    """What the hub serves: a copy of the tiny qwen2 checkpoint."""
    return shutil.copytree(repo_tiny_models / "qwen2", tmp_path / "served")


@pytest.fixture
def hub(served, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    with HubServer({REPO_ID: served}, bytes_per_s=2_000_000) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


@pytest.fixture
def admin_api(django_user_model):
    user = django_user_model.objects.create_superuser("root", password="x")
    _, secret = api_key_create(user=user, name="k", scopes=["deployments:read", "deployments:write", "admin"])
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return api


def import_ended(name: str, timeout: float = 120) -> Model:
    return wait_for(lambda: Model.objects.filter(name=name).exclude(status="importing").first(),
                    timeout=timeout, interval=0.1, what=f"import of {name} ended")  # fmt: skip


def same_files(imported, served) -> None:
    expected = repo_files(served)
    got = {path: file for path, file in repo_files(imported).items() if path != "provenance.json"}
    assert sorted(got) == sorted(path for path in expected if path != "provenance.json")
    for path, file in got.items():
        assert file.read_bytes() == expected[path].read_bytes(), path


def test_a_hub_import_downloads_off_the_request_path_recording_progress_then_is_ready(
    models_dir, hub, admin_api, served
):
    hub.bytes_per_s = 400_000  # a few seconds, so that the progress can be read meanwhile
    started = admin_api.post("/api/models/", {"hub": REPO_ID, "name": "hubby"}, format="json")
    assert started.status_code == 202, started.content
    assert started.json()["status"] == "importing" and started.json()["hub_repo"] == REPO_ID
    seen = []

    def sample():
        listed = (models_dir / "hubby").exists()
        row = Model.objects.get(name="hubby")
        seen.append((row.bytes_done, row.files_done, row.bytes_total))
        assert not listed or row.bytes_done == row.bytes_total  # in the models folder only once complete
        return row if row.status != "importing" else None

    model = wait_for(sample, timeout=120, interval=0.1, what="import done")
    assert model.status == "ready", model.status_reason
    total = sum(file.stat().st_size for file in repo_files(served).values())
    assert (model.bytes_done, model.bytes_total, model.files_done, model.files_total) == (total, total, 7, 7)
    progress = [done for done, _, of in seen if of == total]
    assert progress == sorted(progress)  # it only grows
    assert len({done for done in progress if 0 < done < total}) >= 2  # it was seen between start and end
    same_files(models_dir / "hubby", served)
    assert not (models_dir / ".imports" / "hubby").exists()
    assert not (models_dir / "hubby" / ".cache").exists()
    provenance = json.loads((models_dir / "hubby" / "provenance.json").read_text())
    assert provenance["source"].startswith(f"hf:{REPO_ID}@") and provenance["random_weights"]  # as the repo says
    listed = admin_api.get("/api/models/hubby/").json()
    assert (listed["family"], listed["status"], listed["path"]) == ("llm", "ready", str(models_dir / "hubby"))
    assert listed["created_by"] == "root"


def test_a_transfer_broken_off_mid_file_continues_where_it_stopped(models_dir, hub, admin_api, served):
    hub.drop_after["model.safetensors"] = 600_000
    assert admin_api.post("/api/models/", {"hub": REPO_ID, "name": "q"}, format="json").status_code == 202
    assert import_ended("q").status == "ready"
    resumed = hub.ranged_gets("model.safetensors")
    assert len(resumed) == 1 and 0 < int(resumed[0].removeprefix("bytes=").rstrip("-")) <= 600_000, resumed
    # ...from the last piece written before the break, not from the file's start
    same_files(models_dir / "q", served)


def test_a_failed_import_is_marked_with_its_reason_and_a_second_import_continues_it(models_dir, hub, admin_api, served):
    hub.broken.add("model.safetensors")
    assert admin_api.post("/api/models/", {"hub": REPO_ID, "name": "q"}, format="json").status_code == 202
    failed = import_ended("q")
    assert failed.status == "failed" and "500" in failed.status_reason and "download" in failed.status_reason
    assert not (models_dir / "q").exists()  # nothing half-downloaded is listed
    assert admin_api.get("/api/models/q/").json()["status"] == "failed"
    call_command("sync_models", stdout=open("/dev/null", "w"))
    assert Model.objects.get(name="q").status == "failed"  # a sync keeps the failed import's row

    kept = {path for path in repo_files(served) if (models_dir / ".imports" / "q" / path).is_file()}
    assert kept and "model.safetensors" not in kept
    hub.broken.clear()
    gets_before = [path for method, path, _ in hub.requests if method == "GET" and "/resolve/" in path]
    again = admin_api.post("/api/models/", {"hub": REPO_ID, "name": "q"}, format="json")
    assert again.status_code == 202, again.content
    assert import_ended("q").status == "ready"
    gets_after = [path for method, path, _ in hub.requests if method == "GET" and "/resolve/" in path]
    fetched_again = {path.rpartition("/")[2] for path in gets_after[len(gets_before) :]}
    assert "model.safetensors" in fetched_again and not fetched_again & kept  # the complete files were kept
    same_files(models_dir / "q", served)


def test_an_offline_server_refuses_a_hub_import_at_once(models_dir, hub, admin_api, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    refused = admin_api.post("/api/models/", {"hub": REPO_ID}, format="json")
    assert refused.status_code == 400 and "HF_HUB_OFFLINE" in refused.json()["hub"][0], refused.content
    assert not Model.objects.exists() and hub.requests == []


def test_an_unreachable_hub_fails_the_import_with_a_clear_reason(models_dir, admin_api, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("HF_ENDPOINT", nowhere)
    assert admin_api.post("/api/models/", {"hub": REPO_ID, "name": "q"}, format="json").status_code == 202
    failed = import_ended("q")
    assert failed.status == "failed" and f"could not reach the hub at {nowhere}" in failed.status_reason
    assert not (models_dir / "q").exists()


def test_an_unknown_repository_fails_naming_it(models_dir, hub, admin_api):
    assert admin_api.post("/api/models/", {"hub": "tiny/nope", "name": "q"}, format="json").status_code == 202
    failed = import_ended("q")
    assert failed.status == "failed" and "no repository tiny/nope" in failed.status_reason


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"hub": "../etc"}, "hub"),
        ({"hub": "a/b/c"}, "hub"),
        ({"hub": REPO_ID, "revision": "../x"}, "revision"),
        ({"hub": REPO_ID, "name": "../escape"}, "name"),
        ({"hub": REPO_ID, "path": "/somewhere"}, "path"),
        ({}, "path"),
    ],
)
def test_a_hub_import_that_cannot_start_is_a_400_naming_the_field(models_dir, hub, admin_api, body, field):
    response = admin_api.post("/api/models/", body, format="json")
    assert response.status_code == 400 and field in response.json(), response.content
    assert not Model.objects.exists()


def test_a_failed_import_can_be_deleted_with_what_it_left(models_dir, hub, admin_api):
    hub.broken.add("model.safetensors")
    admin_api.post("/api/models/", {"hub": REPO_ID, "name": "q"}, format="json")
    assert import_ended("q").status == "failed"
    assert (models_dir / ".imports" / "q" / "config.json").is_file()
    assert admin_api.delete("/api/models/q/").status_code == 204
    assert not (models_dir / ".imports" / "q").exists() and not Model.objects.filter(name="q").exists()


def test_a_name_being_imported_is_not_taken_twice(models_dir, hub, admin_api):
    hub.bytes_per_s = 100_000
    assert admin_api.post("/api/models/", {"hub": REPO_ID, "name": "q"}, format="json").status_code == 202
    twice = admin_api.post("/api/models/", {"hub": REPO_ID, "name": "q"}, format="json")
    assert twice.status_code == 400 and "being imported" in twice.json()["name"][0]
    busy = admin_api.delete("/api/models/q/")
    assert busy.status_code == 409 and "being imported" in busy.json()["detail"]
    hub.bytes_per_s = None
    assert import_ended("q").status == "ready"


def test_an_import_whose_process_died_is_taken_up_again(models_dir, hub, admin_api):
    Model.objects.create(name="q", path="-", status="importing", hub_repo=REPO_ID, hub_revision="main")
    assert admin_api.post("/api/models/", {"hub": REPO_ID, "name": "q"}, format="json").status_code == 400
    Model.objects.filter(name="q").update(updated_at=timezone.now() - timedelta(minutes=10))  # no process touches it
    assert Model.objects.get(name="q").import_stalled
    assert admin_api.post("/api/models/", {"hub": REPO_ID, "name": "q"}, format="json").status_code == 202
    assert import_ended("q").status == "ready"
