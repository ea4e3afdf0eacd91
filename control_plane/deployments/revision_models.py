"""Revisions: every change of a deployment's DeployConfig (and of a pipeline's config) is a row
with its number, author, time, the whole config and its diff against the previous revision."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class RevisionState(models.TextChoices):
    ROLLING = "ROLLING", "rolling out"
    ACTIVE = "ACTIVE", "serving"
    SUPERSEDED = "SUPERSEDED", "replaced by a later revision"
    FAILED = "FAILED", "rollout failed"


class DeploymentRevision(models.Model):
    deployment = models.ForeignKey("deployments.Deployment", on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    config = models.JSONField(help_text="The whole DeployConfig of this revision.")
    diff = models.JSONField(
        default=list, blank=True, help_text="Changes from the previous revision: [{path, old, new}]."
    )
    state = models.CharField(max_length=16, choices=RevisionState.choices, default=RevisionState.ROLLING)
    state_reason = models.TextField(blank=True)
    rollback_of = models.PositiveIntegerField(
        null=True, blank=True, help_text="The earlier revision whose config this one restores."
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    step_started_at = models.DateTimeField(
        null=True, blank=True, help_text="When the rollout started its latest new replica (its readiness timeout)."
    )
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["deployment", "-number"]
        constraints = [models.UniqueConstraint(fields=["deployment", "number"], name="unique_deployment_revision")]

    def __str__(self) -> str:
        return f"{self.deployment.name} r{self.number}"


class PipelineRevision(models.Model):
    pipeline = models.ForeignKey("deployments.Pipeline", on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField(help_text="The pipeline's `version` this config had.")
    config = models.JSONField()
    diff = models.JSONField(default=list, blank=True)
    source = models.CharField(max_length=32, default="sync", help_text="What changed it: sync, admin, migration.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["pipeline", "-number"]
        constraints = [models.UniqueConstraint(fields=["pipeline", "number"], name="unique_pipeline_revision")]

    def __str__(self) -> str:
        return f"{self.pipeline.name} v{self.number}"
