"""Writing the model registry: syncing it with the disk, and deleting a checkpoint."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import transaction

from control_plane.registry.models import Model
from control_plane.registry.queries import deployments_using
from control_plane.registry.staging import discard

FIELDS = ("path", "family", "architecture", "size_bytes", "parameter_count", "dtype", "source", "random_weights")


@dataclass(frozen=True)
class SyncResult:
    created: int
    updated: int
    removed: int


class ModelInUse(Exception):
    def __init__(self, model: Model, deployments: list[str]):
        self.model = model
        self.deployments = deployments
        names = ", ".join(repr(name) for name in deployments)
        super().__init__(f"model {model.name!r} is used by deployment {names}; delete the deployment first")


@transaction.atomic
def models_sync(found: list[dict]) -> SyncResult:
    """Make the rows match the checkpoints found on disk (rows of vanished checkpoints are removed;
    rows of imports under way or failed are not checkpoints yet and are left alone, until their
    checkpoint appears, which makes them ready)."""
    created = updated = 0
    for item in found:
        values = {**{field: item[field] for field in FIELDS}, "status": Model.Status.READY, "status_reason": ""}
        model = Model.objects.filter(name=item["name"]).first()
        if model is None:
            Model.objects.create(name=item["name"], **values)
            created += 1
        elif any(getattr(model, field) != value for field, value in values.items()):
            Model.objects.filter(pk=model.pk).update(**values)
            updated += 1
    vanished = Model.objects.filter(status=Model.Status.READY).exclude(name__in=[item["name"] for item in found])
    removed, _ = vanished.delete()
    return SyncResult(created=created, updated=updated, removed=removed)


class ModelImporting(Exception):
    def __init__(self, model: Model):
        self.model = model
        super().__init__(f"model {model.name!r} is being imported; delete it once the import ended")


def model_delete(*, model: Model) -> None:
    """Delete the row and its directory in the models folder (only the link, for a linked import),
    or what a failed import left; refused while a deployment serves it or an import runs."""
    if model.status == Model.Status.IMPORTING and not model.import_stalled:
        raise ModelImporting(model)
    if model.status != Model.Status.READY:
        discard(model.name)
        model.delete()
        return
    users = deployments_using(model)
    if users:
        raise ModelInUse(model, users)
    in_models_dir = Path(settings.MODELS_DIR) / model.name
    if in_models_dir.is_symlink():  # a linked import: the files stay where they were
        in_models_dir.unlink()
    elif in_models_dir.is_dir():
        shutil.rmtree(in_models_dir)
    model.delete()
