"""Importing a checkpoint from the Hugging Face hub by repository id.

`model_import_hub` records the model at once (`importing`) and starts the download off the request
path (`import_jobs`); `hub_import_run` is that download: it lists the revision (one request, a
few seconds at most, no retries: an unreachable hub fails the import at once), downloads with
`huggingface_hub.snapshot_download` into the model's staging folder while the row records the
progress, checks every listed file is there at its size, and only then moves the folder into the
models folder and marks the model ready. A failed import keeps its staging folder: importing the
same repository under the same name again continues it (files already complete are kept), and
so does one whose process died without saying (`Model.import_stalled`).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from control_plane.registry import import_jobs
from control_plane.registry.discovery import discover_models
from control_plane.registry.hub_progress import ProgressRecorder, folder_progress
from control_plane.registry.imports import NAME_PATTERN, ImportInvalid, name_free
from control_plane.registry.models import Model
from control_plane.registry.services import models_sync
from control_plane.registry.staging import discard, promote, staging_dir
from stages.provenance import Provenance, read_provenance, write_provenance

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://huggingface.co"
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?$")
REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
LISTING_TIMEOUT_S = 10.0
DOWNLOAD_WORKERS = 4
# huggingface_hub reads a response 10 MiB at a time and writes and counts only whole pieces: with
# smaller ones the bar moves within a file, and a transfer that breaks off resumes (a Range request)
# from the last piece written rather than from the file's start, for files under 10 MiB too.
CHUNK_BYTES = 256 * 1024


class HubImportFailed(Exception):
    """Why an import from the hub stopped, in words for the Models page."""


@dataclass(frozen=True)
class Listing:
    commit: str
    files: dict[str, int]  # path in the repository: size in bytes


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "").strip().rstrip("/") or DEFAULT_ENDPOINT


def hub_offline() -> bool:
    return any(os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
               for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))  # fmt: skip


def model_import_hub(*, repo_id: str, revision: str = "main", name: str = "", user=None) -> Model:
    """Record the model as importing and start its download; a failed import of the same
    repository under the same name is taken up again where it stopped."""
    repo_id, revision = repo_id.strip(), (revision or "main").strip()
    if not REPO_ID.match(repo_id) or ".." in repo_id:
        raise ImportInvalid("hub", "a hub repository id: 'organisation/name' (letters, digits, '.', '_', '-')")
    if not REVISION.match(revision) or ".." in revision:
        raise ImportInvalid("revision", "a branch, tag or commit of the repository")
    if hub_offline():
        raise ImportInvalid("hub", "the Hugging Face hub is off on this server (HF_HUB_OFFLINE is set); "
                                   "import from a server path or an archive instead")  # fmt: skip
    name = name or repo_id.rpartition("/")[2]
    if not NAME_PATTERN.match(name):
        raise ImportInvalid("name", "letters, digits, '.', '_' and '-' only (and not starting with '.', '_' or '-')")
    with transaction.atomic():
        model = _claim(name, repo_id, revision, user)
        transaction.on_commit(lambda: import_jobs.launch(name))
    return model


def _claim(name: str, repo_id: str, revision: str, user) -> Model:
    existing = Model.objects.select_for_update().filter(name=name).first()
    fields = {"status": Model.Status.IMPORTING, "status_reason": "", "hub_repo": repo_id, "hub_revision": revision,
              "source": f"hf:{repo_id}@{revision}", "updated_at": timezone.now()}  # fmt: skip
    resumable = existing is not None and (existing.status == Model.Status.FAILED or existing.import_stalled)
    if resumable and existing.hub_repo == repo_id:
        if existing.hub_revision != revision:  # another revision: start afresh
            discard(name)
        Model.objects.filter(pk=existing.pk).update(**fields)
        return Model.objects.get(pk=existing.pk)
    if existing is not None and resumable:
        raise ImportInvalid("name", f"a failed import of {existing.hub_repo} holds the name {name!r}: delete it first")
    if existing is not None:
        doing = "is being imported" if existing.status == Model.Status.IMPORTING else "exists already"
        raise ImportInvalid("name", f"a model named {name!r} {doing}")
    name_free(name)
    discard(name)  # anything an earlier, forgotten import left
    return Model.objects.create(name=name, path=str(staging_dir(name)), created_by=user, **fields)


def hub_import_run(name: str) -> Model:
    """The download of an importing model, to its end: ready, or failed with the reason."""
    model = Model.objects.get(name=name)
    try:
        listing = hub_listing(model.hub_repo, model.hub_revision)
        _download(model, listing)
        _finish(model, listing)
    except HubImportFailed as error:
        return _fail(model, str(error))
    except Exception as error:  # any other failure must still end the import, with its reason
        log.exception("import of %s from the hub failed", name)
        return _fail(model, f"{type(error).__name__}: {error}")
    return Model.objects.get(name=name)


def hub_listing(repo_id: str, revision: str) -> Listing:
    """The revision's commit and files with their sizes, in one request without retries."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    if hub_offline():
        raise HubImportFailed("the Hugging Face hub is off on this server (HF_HUB_OFFLINE is set)")
    endpoint = hub_endpoint()
    try:
        info = HfApi(endpoint=endpoint).model_info(repo_id, revision=revision, files_metadata=True,
                                                   timeout=LISTING_TIMEOUT_S)  # fmt: skip
    except GatedRepoError:
        raise HubImportFailed(
            f"{repo_id} is gated on the hub: accept its terms and give the server a token (HF_TOKEN)"
        ) from None
    except RevisionNotFoundError:
        raise HubImportFailed(f"{repo_id} has no revision {revision!r} on the hub") from None
    except RepositoryNotFoundError:
        raise HubImportFailed(f"no repository {repo_id} on the hub at {endpoint} (or it is private)") from None
    except HfHubHTTPError as error:
        raise HubImportFailed(f"the hub at {endpoint} answered {error.response.status_code} for {repo_id}") from None
    except Exception as error:  # connection refused, DNS, timeout: the hub cannot be reached
        raise HubImportFailed(f"could not reach the hub at {endpoint}: {type(error).__name__}: {error}") from None
    files = {sibling.rfilename: int(sibling.size or 0) for sibling in info.siblings or []}
    if not info.sha or not files:
        raise HubImportFailed(f"the hub listed no files for {repo_id}@{revision}")
    return Listing(commit=info.sha, files=files)


def _download(model: Model, listing: Listing) -> None:
    from huggingface_hub import constants, snapshot_download

    constants.DOWNLOAD_CHUNK_SIZE = CHUNK_BYTES  # read at each request; this process imports one model
    folder = staging_dir(model.name)
    folder.mkdir(parents=True, exist_ok=True)
    done_bytes, done_files = folder_progress(folder, listing.files)
    Model.objects.filter(pk=model.pk).update(bytes_total=sum(listing.files.values()), files_total=len(listing.files),
                                             bytes_done=done_bytes, files_done=done_files,
                                             updated_at=timezone.now())  # fmt: skip
    with ProgressRecorder(model.pk, folder, listing.files):
        try:
            snapshot_download(model.hub_repo, revision=listing.commit, local_dir=folder, endpoint=hub_endpoint(),
                              cache_dir=folder.parent / ".hub-cache", max_workers=DOWNLOAD_WORKERS)  # fmt: skip
        except Exception as error:
            raise HubImportFailed(
                f"the download from {hub_endpoint()} stopped: {type(error).__name__}: {error}"
            ) from None


def _finish(model: Model, listing: Listing) -> None:
    folder = staging_dir(model.name)
    wrong = [path for path, size in listing.files.items() if not _has_size(folder / path, size)]
    if wrong:
        raise HubImportFailed(f"{len(wrong)} file(s) missing or incomplete after the download: {', '.join(wrong[:3])}")
    kept = read_provenance(folder)
    write_provenance(folder, Provenance(source=f"hf:{model.hub_repo}@{listing.commit[:12]}",
                                        random_weights=kept.random_weights if kept else False))  # fmt: skip
    promote(folder, model.name)
    models_sync(discover_models())
    total = sum(listing.files.values())
    Model.objects.filter(name=model.name).update(bytes_done=total, files_done=len(listing.files))


def _has_size(path: Path, size: int) -> bool:
    return path.is_file() and path.stat().st_size == size


def _fail(model: Model, reason: str) -> Model:
    Model.objects.filter(pk=model.pk, status=Model.Status.IMPORTING).update(
        status=Model.Status.FAILED, status_reason=reason[:2000]
    )
    return Model.objects.get(pk=model.pk)
