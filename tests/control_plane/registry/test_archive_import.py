"""Importing a checkpoint from an uploaded tar or zip archive: unpacked, listed and deployable by
name; a member that would land outside the checkpoint's folder (path traversal), a link, or a
file that is no archive is refused with a 400 on `archive`, leaving nothing behind."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile

import numpy as np
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient
from safetensors.numpy import save_file

from control_plane.accounts.services import api_key_create
from control_plane.registry.models import Model

pytestmark = pytest.mark.django_db


@pytest.fixture
def models_dir(tmp_path, settings):
    settings.MODELS_DIR = tmp_path / "models"
    settings.MODELS_DIR.mkdir()
    return settings.MODELS_DIR


@pytest.fixture
def checkpoint(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "dtype": "float32"}
    (folder / "config.json").write_text(json.dumps(config))
    save_file({"embed": np.ones((10, 4), np.float32)}, folder / "model.safetensors")
    return folder


@pytest.fixture
def admin_api(django_user_model):
    user = django_user_model.objects.create_superuser("root", password="x")
    _, secret = api_key_create(user=user, name="k", scopes=["deployments:read", "deployments:write", "admin"])
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return api


def tar_of(entries: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def file_entry(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def upload(api, filename: str, data: bytes, **fields):
    return api.post("/api/models/", {"archive": SimpleUploadedFile(filename, data), **fields}, format="multipart")


def test_a_tar_of_a_checkpoint_directory_is_imported_under_its_name(models_dir, checkpoint, admin_api):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(checkpoint, arcname="my-llama")
    created = upload(admin_api, "my-llama.tar.gz", buffer.getvalue())
    assert created.status_code == 201, created.content
    assert (created.json()["name"], created.json()["family"], created.json()["status"]) == ("my-llama", "llm", "ready")
    imported = models_dir / "my-llama" / "model.safetensors"
    assert imported.read_bytes() == (checkpoint / "model.safetensors").read_bytes()
    assert not (models_dir / ".imports" / "my-llama").exists()


def test_a_zip_of_a_directorys_contents_is_imported_under_the_given_name(models_dir, checkpoint, admin_api):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zipped:
        for file in checkpoint.iterdir():
            zipped.write(file, file.name)
    created = upload(admin_api, "whatever.zip", buffer.getvalue(), name="zipped")
    assert created.status_code == 201, created.content
    assert (models_dir / "zipped" / "config.json").is_file() and Model.objects.get(name="zipped").family == "llm"


def symlink_entry(name: str, target: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info, None


def zip_of(name: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zipped:
        zipped.writestr("config.json", b"{}")
        zipped.writestr(name, data)
    return buffer.getvalue()


CONFIG = file_entry("config.json", b'{"model_type": "llama"}')


@pytest.mark.parametrize(
    ("filename", "archive", "says"),
    [
        ("evil.tar.gz", lambda: tar_of([CONFIG, file_entry("../../escaped.txt", b"x")]), "path traversal"),
        ("evil.tar", lambda: tar_of([CONFIG, file_entry("/tmp/absolute.txt", b"x")], "w"), "path traversal"),
        ("evil.tar.gz", lambda: tar_of([CONFIG, symlink_entry("link", "/etc/passwd")]), "link"),
        ("evil.zip", lambda: zip_of("../escaped.txt", b"x"), "path traversal"),
        ("evil.zip", lambda: zip_of("sub\\..\\..\\escaped.txt", b"x"), "path traversal"),
        ("plain.tar.gz", lambda: b"not an archive at all", "neither a tar nor a zip"),
        ("empty.tar.gz", lambda: tar_of([file_entry("notes.txt", b"x")]), "neither config.json"),
    ],
)
def test_a_bad_archive_is_a_400_on_archive_and_leaves_nothing(models_dir, admin_api, tmp_path, filename, archive, says):
    refused = upload(admin_api, filename, archive())
    assert refused.status_code == 400, refused.content
    assert says in refused.json()["archive"][0]
    assert not Model.objects.exists()
    assert [p.name for p in models_dir.iterdir()] in ([], [".imports"])
    assert not any((models_dir / ".imports").iterdir()) if (models_dir / ".imports").exists() else True
    assert not list(tmp_path.rglob("escaped.txt")) and not (tmp_path.parent / "escaped.txt").exists()


def test_an_archive_over_an_existing_name_is_refused(models_dir, checkpoint, admin_api):
    (models_dir / "taken").mkdir()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(checkpoint, arcname=".")
    refused = upload(admin_api, "taken.tar", buffer.getvalue())
    assert refused.status_code == 400 and "exists already" in refused.json()["name"][0]
