"""The checkpoints on disk that deployments can serve, discovered under OMNISTAGE_MODELS_DIR."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Model(models.Model):
    """One checkpoint directory. `name` is what a deploy form or API call may give as `model_dir`."""

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
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, help_text="Who imported it."
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
