"""Request history: one InferenceRequest per API call, with the media it produced.

Rows are written for every request, including the ones that fail validation at the
engine, run out of capacity, or whose client goes away (status `cancelled`). Video
jobs are InferenceRequests too (route `videos`): the row is the job, `progress` and
`lease_expires_at` let another web process pick it up after a restart. A custom voice's creation
is one too (route `audio.voices`): its artifacts are the reference clip and the derived
conditioning, and the `CustomVoice` names them for its owner.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone


class Route(models.TextChoices):
    CHAT = "chat.completions"
    COMPLETIONS = "completions"
    SPEECH = "audio.speech"
    TRANSCRIPTIONS = "audio.transcriptions"
    TRANSLATIONS = "audio.translations"
    RESPONSES = "responses"
    IMAGES = "images.generations"
    IMAGE_EDITS = "images.edits"
    VIDEOS = "videos"
    REALTIME = "realtime"
    VOICES = "audio.voices"


class Status(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINAL_STATUSES = (Status.COMPLETED, Status.FAILED, Status.CANCELLED)


class InferenceRequest(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    request_id = models.CharField(max_length=100, unique=True, help_text="The id the API answered with.")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="inference_requests"
    )
    api_key = models.ForeignKey(
        "accounts.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="inference_requests"
    )
    deployment = models.ForeignKey(
        "deployments.Deployment", null=True, blank=True, on_delete=models.SET_NULL, related_name="inference_requests"
    )
    deployment_name = models.CharField(max_length=100, blank=True, db_index=True, help_text="The `model` asked for.")
    route = models.CharField(max_length=32, choices=Route.choices, db_index=True)
    stream = models.BooleanField(default=False)
    inputs = models.JSONField(default=dict, blank=True, help_text="Prompt or messages; large media are summarised.")
    parameters = models.JSONField(default=dict, blank=True)
    modalities = models.CharField(
        max_length=64, blank=True, help_text="Output modalities, comma-separated with leading and trailing commas."
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    finish_reason = models.CharField(max_length=32, blank=True)
    error = models.JSONField(null=True, blank=True, help_text="OpenAI error object: message, type, param, code.")
    output_text = models.TextField(blank=True)
    usage = models.JSONField(default=dict, blank=True, help_text="Per modality: text tokens, audio seconds, images…")
    queue_s = models.FloatField(null=True, blank=True)
    ttft_s = models.FloatField(null=True, blank=True)
    tpot_s = models.FloatField(null=True, blank=True)
    ttfp_s = models.FloatField(null=True, blank=True)
    e2el_s = models.FloatField(null=True, blank=True)
    rtf = models.FloatField(null=True, blank=True)
    stage_metrics = models.JSONField(default=dict, blank=True, help_text="Per stage: duration_s, first_output_s.")
    progress = models.FloatField(default=0.0)
    attempts = models.PositiveIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True, help_text="Jobs: who runs it holds a lease.")
    deleted_at = models.DateTimeField(
        null=True, blank=True, help_text="Deleted through the API (a video job): hidden there, kept in history."
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["user", "created_at"]),
            models.Index(fields=["deployment_name", "created_at"]),
            models.Index(fields=["route", "status"]),
        ]

    def __str__(self) -> str:
        return f"{self.request_id} ({self.route}, {self.status})"

    @property
    def modality_list(self) -> list[str]:
        return [m for m in self.modalities.split(",") if m]

    @property
    def is_final(self) -> bool:
        return self.status in FINAL_STATUSES


def artifact_path(artifact: Artifact, filename: str) -> str:
    day = timezone.now().strftime("%Y/%m/%d")
    return f"artifacts/{day}/{artifact.request.request_id}/{filename}"


class Artifact(models.Model):
    class Kind(models.TextChoices):
        AUDIO = "audio"
        IMAGE = "image"
        VIDEO = "video"
        CONDITIONING = "conditioning"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    request = models.ForeignKey(InferenceRequest, on_delete=models.CASCADE, related_name="artifacts")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    index = models.PositiveIntegerField(default=0)
    file = models.FileField(upload_to=artifact_path, max_length=300)
    mime_type = models.CharField(max_length=64)
    size_bytes = models.PositiveBigIntegerField(default=0)
    meta = models.JSONField(default=dict, blank=True, help_text="sample_rate, duration_s, width, height, format…")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["request", "kind", "index"]

    def __str__(self) -> str:
        return f"{self.request.request_id}/{self.kind}#{self.index}"


class CustomVoice(models.Model):
    """A user's voice made from a reference clip (`POST /v1/audio/voices`), usable by that user only, on
    deployments of the family and checkpoint its conditioning was derived on. The clip (`audio`) and
    the conditioning (`conditioning`, an .npz archive) are the artifacts of its creation's request row."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="custom_voices")
    name = models.CharField(max_length=64)
    family = models.CharField(max_length=64)
    model_dir = models.CharField(max_length=500, help_text="The checkpoint its conditioning was derived on.")
    deployment_name = models.CharField(max_length=100, help_text="The deployment it was made on.")
    request = models.OneToOneField(InferenceRequest, on_delete=models.CASCADE, related_name="custom_voice")
    nearest_voice = models.CharField(max_length=64, blank=True, help_text="The built-in voice it borrows from.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["user", "name"], name="custom_voice_unique_name")]

    def __str__(self) -> str:
        return f"{self.name} ({self.user_id})"
