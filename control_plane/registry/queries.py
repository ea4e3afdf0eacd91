"""Reading the model registry."""

from __future__ import annotations

from pathlib import Path

from django.db.models import Q, QuerySet

from control_plane.deployments.models import Deployment
from control_plane.registry.models import Model


def model_list(*, search: str = "", family: str = "") -> QuerySet[Model]:
    models = Model.objects.all()
    if search:
        models = models.filter(
            Q(name__icontains=search) | Q(architecture__icontains=search) | Q(source__icontains=search)
        )
    if family:
        models = models.filter(family=family)
    return models


def model_families() -> list[str]:
    return sorted(set(Model.objects.exclude(family="").values_list("family", flat=True)))


def models_by_family() -> dict[str, list[Model]]:
    grouped: dict[str, list[Model]] = {}
    for model in Model.objects.exclude(family=""):
        grouped.setdefault(model.family, []).append(model)
    return grouped


def deployments_using(model: Model) -> list[str]:
    """Names of the deployments whose checkpoint is this model (by name or by path)."""
    target = Path(model.path).resolve()
    return sorted(
        name
        for name, model_dir in Deployment.objects.values_list("name", "model_dir")
        if model_dir == model.name or Path(model_dir).resolve() == target
    )


IMPORT_FIELDS = ("name", "status", "status_reason", "bytes_done", "bytes_total", "files_done", "files_total")


def model_imports(*, also: list[str] | tuple[str, ...] = ()) -> list[dict]:
    """The imports under way or failed, and the models named in `also` (imports seen under way
    earlier, to learn how they ended), as dicts of their status and progress."""
    rows = Model.objects.filter(Q(status__in=[Model.Status.IMPORTING, Model.Status.FAILED]) | Q(name__in=list(also)))
    return list(rows.values(*IMPORT_FIELDS))
