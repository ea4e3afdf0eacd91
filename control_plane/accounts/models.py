from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class ApiKey(models.Model):
    """An API key: the secret is shown once at creation; only its SHA-256 is stored."""

    class Scope(models.TextChoices):
        INFERENCE = "inference"
        DEPLOYMENTS_READ = "deployments:read"
        DEPLOYMENTS_WRITE = "deployments:write"
        ADMIN = "admin"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True, help_text="Visible part, to recognise the key.")
    hashed_secret = models.CharField(max_length=64)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > timezone.now()
