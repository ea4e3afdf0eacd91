from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone


class Pipeline(models.Model):
    """A model family's stage graph (a frozen PipelineConfig), synced from `stages.models`."""

    name = models.SlugField(max_length=100, unique=True)
    family = models.CharField(max_length=64)
    variant = models.CharField(max_length=64, default="default")
    description = models.TextField(blank=True)
    config = models.JSONField(help_text="The PipelineConfig as JSON.")
    version = models.PositiveIntegerField(default=1)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["family", "variant"]

    def __str__(self) -> str:
        return self.name


class DeploymentState(models.TextChoices):
    PENDING = "PENDING"
    SCHEDULED = "SCHEDULED"
    LOADING = "LOADING"
    WARMING = "WARMING"
    RUNNING = "RUNNING"
    DRAINING = "DRAINING"
    STOPPED = "STOPPED"
    ERROR = "ERROR"


class Deployment(models.Model):
    """A pipeline with a deploy config and a lifecycle. Its name is the API's `model`."""

    class Desired(models.TextChoices):
        RUNNING = "RUNNING"
        STOPPED = "STOPPED"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.SlugField(max_length=100, unique=True)
    pipeline = models.ForeignKey(Pipeline, on_delete=models.PROTECT, related_name="deployments")
    model_dir = models.CharField(max_length=500, help_text="Checkpoint directory (or hub id) of the model.")
    deploy_config = models.JSONField(default=dict, help_text="The DeployConfig as JSON.")
    desired_state = models.CharField(max_length=16, choices=Desired.choices, default=Desired.RUNNING)
    state = models.CharField(max_length=16, choices=DeploymentState.choices, default=DeploymentState.PENDING)
    state_reason = models.TextField(blank=True)
    state_changed_at = models.DateTimeField(default=timezone.now)
    warmup_attempts = models.PositiveIntegerField(default=0)
    revision = models.PositiveIntegerField(
        default=1, help_text="The number of the revision whose config `deploy_config` is (the one serving)."
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name


class Replica(models.Model):
    """One copy of one stage of a deployment, hosted by a worker of the stage's pool. A replica of
    a stage group hosts every stage of the group in one process: `stage` is the group's entry."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="replicas")
    stage = models.CharField(max_length=64)
    stage_id = models.PositiveIntegerField()
    group = models.CharField(max_length=64, blank=True, help_text="The stage group this replica hosts, if any.")
    members = models.JSONField(default=list, blank=True, help_text="The stages of its group, entry first.")
    index = models.PositiveIntegerField(default=0)
    pool = models.CharField(max_length=64)
    device = models.CharField(max_length=32, default="cpu")
    host = models.CharField(max_length=200, blank=True)
    state = models.CharField(max_length=16, choices=DeploymentState.choices, default=DeploymentState.PENDING)
    state_reason = models.TextField(blank=True)
    state_changed_at = models.DateTimeField(default=timezone.now)
    progress = models.FloatField(default=0.0)
    weights_loaded_bytes = models.BigIntegerField(
        null=True, blank=True, help_text="Bytes of weights its host last reported read (null: not counted)."
    )
    weights_total_bytes = models.BigIntegerField(
        null=True, blank=True, help_text="Bytes of weights its host reads in all (null: not counted)."
    )
    queue_depth = models.PositiveIntegerField(default=0)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    restarts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    next_start_at = models.DateTimeField(null=True, blank=True)
    transfers = models.JSONField(
        default=dict, blank=True, help_text="Connector totals its host last reported: count, bytes, seconds."
    )
    revision = models.PositiveIntegerField(default=1, help_text="The deployment revision whose config it runs.")
    retired = models.BooleanField(
        default=False, help_text="Replaced by a rollout (or a failed rollout's): removed once it stopped."
    )

    class Meta:
        ordering = ["deployment", "stage_id", "index", "revision"]
        constraints = [
            models.UniqueConstraint(fields=["deployment", "stage", "index", "revision"], name="unique_replica_slot")
        ]

    def __str__(self) -> str:
        return f"{self.deployment.name}/{self.label}#{self.index}"

    @property
    def label(self) -> str:
        """What it hosts: its stage, or its group and the group's stages."""
        return f"{self.group} ({'+'.join(self.members)})" if self.group else self.stage


from control_plane.deployments.revision_models import DeploymentRevision, PipelineRevision, RevisionState  # noqa: E402

__all__ = ["Deployment", "DeploymentRevision", "DeploymentState", "Pipeline", "PipelineRevision", "Replica",
           "RevisionState"]  # fmt: skip
