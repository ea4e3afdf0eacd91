from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone


class ApiKey(models.Model):
    """An API key: the secret is shown once at creation; only its SHA-256 is stored.

    `allowed_deployments` is a JSON list of deployment *names* (empty: every deployment).
    Names, not foreign keys, because the Deployment model belongs to another app and a
    key may name a deployment before it exists; `permissions.deployment_allowed` compares
    them with a deployment's `name`.
    """

    class Scope(models.TextChoices):
        INFERENCE = "inference", "inference: call /v1 and read own usage and quota"
        DEPLOYMENTS_READ = "deployments:read", "deployments:read"
        DEPLOYMENTS_WRITE = "deployments:write", "deployments:write"
        KEYS = "keys", "keys: list, create and revoke own API keys"
        ADMIN = "admin", "admin: everything (staff users only)"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True, help_text="Visible part, to recognise the key.")
    hashed_secret = models.CharField(max_length=64)
    scopes = models.JSONField(default=list)
    allowed_deployments = models.JSONField(
        default=list, blank=True, help_text="Deployment names this key may use; empty means all."
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > timezone.now()


class Metric(models.TextChoices):
    """What a quota counts. Amounts are in the unit the name says."""

    REQUESTS = "requests", "requests"
    TEXT_TOKENS = "text_tokens", "text tokens (in + out)"
    AUDIO_SECONDS_IN = "audio_seconds_in", "audio seconds in"
    AUDIO_SECONDS_OUT = "audio_seconds_out", "audio seconds out"
    IMAGES = "images", "images"
    VIDEO_SECONDS = "video_seconds", "video seconds"
    REALTIME_MINUTES = "realtime_minutes", "realtime minutes"
    CONCURRENT_REQUESTS = "concurrent_requests", "concurrent requests"


class Window(models.TextChoices):
    """Fixed windows aligned to UTC (a day starts at 00:00 UTC). Concurrency has none."""

    MINUTE = "minute", "per minute"
    HOUR = "hour", "per hour"
    DAY = "day", "per day"
    NONE = "none", "at any time (concurrency)"


WINDOW_SECONDS = {Window.MINUTE: 60, Window.HOUR: 3600, Window.DAY: 86400}


class Quota(models.Model):
    """One limit on one metric over one window, for a user, a key, or every user (default).

    A default rule (no user, no key) applies to each user separately, unless that user
    has their own rule for the same metric and window. User rules count everything the
    user does with any key or session; key rules count what is done with that key.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True, related_name="quotas"
    )
    api_key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, null=True, blank=True, related_name="quotas")
    metric = models.CharField(max_length=32, choices=Metric.choices)
    window = models.CharField(max_length=16, choices=Window.choices)
    limit = models.PositiveBigIntegerField()
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["user_id", "api_key_id", "metric", "window"]
        constraints = [
            models.CheckConstraint(
                condition=Q(user__isnull=True) | Q(api_key__isnull=True), name="quota_user_or_key_not_both"
            ),
            models.UniqueConstraint(
                fields=["user", "metric", "window"], condition=Q(api_key__isnull=True), name="quota_unique_user_rule"
            ),
            models.UniqueConstraint(
                fields=["api_key", "metric", "window"], condition=Q(user__isnull=True), name="quota_unique_key_rule"
            ),
            models.UniqueConstraint(
                fields=["metric", "window"],
                condition=Q(user__isnull=True, api_key__isnull=True),
                name="quota_unique_default_rule",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.subject_label}: {self.limit} {self.metric} {self.get_window_display()}"

    @property
    def subject_label(self) -> str:
        if self.api_key_id:
            return f"key {self.api_key}"
        if self.user_id:
            return f"user {self.user}"
        return "every user"

    def clean(self) -> None:
        if self.user_id and self.api_key_id:
            raise ValidationError({"api_key": "A quota applies to a user or to a key, not both."})
        concurrency = self.metric == Metric.CONCURRENT_REQUESTS
        if concurrency and self.window != Window.NONE:
            raise ValidationError({"window": "Concurrent requests have no window: choose 'at any time'."})
        if not concurrency and self.window == Window.NONE:
            raise ValidationError({"window": "Choose a minute, hour or day window for this metric."})


class UsageRecord(models.Model):
    """What one request consumed. `request_id` is the serving path's request id (unique:
    recording is idempotent); the InferenceRequest, when it exists, carries the same id."""

    class Modality(models.TextChoices):
        TEXT = "text"
        AUDIO = "audio"
        IMAGE = "image"
        VIDEO = "video"
        REALTIME = "realtime"

    request_id = models.CharField(max_length=100, unique=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="usage_records"
    )
    api_key = models.ForeignKey(ApiKey, on_delete=models.SET_NULL, null=True, blank=True, related_name="usage_records")
    deployment = models.CharField(max_length=200, blank=True, db_index=True)
    modality = models.CharField(max_length=16, choices=Modality.choices, db_index=True)
    text_tokens_in = models.PositiveBigIntegerField(default=0)
    text_tokens_out = models.PositiveBigIntegerField(default=0)
    audio_seconds_in = models.FloatField(default=0.0)
    audio_seconds_out = models.FloatField(default=0.0)
    images = models.PositiveIntegerField(default=0)
    video_seconds = models.FloatField(default=0.0)
    realtime_minutes = models.FloatField(default=0.0)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["user", "created_at"]), models.Index(fields=["api_key", "created_at"])]

    def __str__(self) -> str:
        return f"{self.request_id} ({self.modality})"
