"""The checkpoints on disk that deployments can serve, discovered under OMNISTAGE_MODELS_DIR."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

STALLED_AFTER_S = 120.0  # an import whose row has not been touched for this long has no process left


class Model(models.Model):
    """One checkpoint directory. `name` is what a deploy form or API call may give as `model_dir`.

    A model imported from the hub is recorded at once, `importing`, with its download's progress;
    it becomes `ready` only once every file is in place under the models folder, or `failed`
    with the reason."""

    class Status(models.TextChoices):
        READY = "ready"
        IMPORTING = "importing"
        FAILED = "failed"

    name = models.CharField(max_length=200, unique=True)
    path = models.CharField(max_length=500, help_text="The checkpoint directory.")
    family = models.CharField(max_length=64, blank=True, help_text="The model family that serves it ('' if none).")
    architecture = models.CharField(max_length=200, blank=True)
    size_bytes = models.BigIntegerField(default=0, help_text="Size on disk.")
    parameter_count = models.BigIntegerField(default=0)
    dtype = models.CharField(max_length=32, blank=True)
    source = models.CharField(max_length=300, blank=True, help_text="Where the weights came from.")
    random_weights = models.BooleanField(
        default=False, help_text="Randomly initialised (a test model): no real answers."
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.READY)
    status_reason = models.TextField(blank=True, help_text="Why an import failed.")
    hub_repo = models.CharField(max_length=200, blank=True, help_text="The hub repository it was imported from.")
    hub_revision = models.CharField(
        max_length=200, blank=True, help_text="The revision asked for (branch, tag, commit)."
    )
    bytes_done = models.BigIntegerField(default=0)
    bytes_total = models.BigIntegerField(default=0)
    files_done = models.IntegerField(default=0)
    files_total = models.IntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, help_text="Who imported it."
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def progress_percent(self) -> float:
        return round(100.0 * self.bytes_done / self.bytes_total, 1) if self.bytes_total else 0.0

    @property
    def import_stalled(self) -> bool:
        """An import whose process died without saying (its row stopped being touched)."""
        idle = (timezone.now() - self.updated_at).total_seconds()
        return self.status == self.Status.IMPORTING and idle > STALLED_AFTER_S
