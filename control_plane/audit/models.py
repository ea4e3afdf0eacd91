"""One row per change an operator made: who, when, what, from where."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Action(models.TextChoices):
    DEPLOYMENT_CREATE = "deployment.create"
    DEPLOYMENT_CHANGE = "deployment.change"
    DEPLOYMENT_SCALE = "deployment.scale"
    DEPLOYMENT_STOP = "deployment.stop"
    DEPLOYMENT_START = "deployment.start"
    DEPLOYMENT_DELETE = "deployment.delete"
    API_KEY_CREATE = "api_key.create"
    API_KEY_CHANGE = "api_key.change"
    API_KEY_REVOKE = "api_key.revoke"
    API_KEY_DELETE = "api_key.delete"
    QUOTA_CREATE = "quota.create"
    QUOTA_CHANGE = "quota.change"
    QUOTA_DELETE = "quota.delete"


class Channel(models.TextChoices):
    CONSOLE = "console"
    API = "api"
    ADMIN = "admin"


class AuditEntry(models.Model):
    """Immutable once written. The actor's username and the target's name are copied, not only
    referenced, so that an entry still reads right after the user or the target is deleted."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="audit_entries"
    )
    actor_name = models.CharField(max_length=150, blank=True)
    api_key_prefix = models.CharField(max_length=16, blank=True, help_text="The key the actor used, if any.")
    action = models.CharField(max_length=32, choices=Action.choices, db_index=True)
    target_kind = models.CharField(max_length=32, db_index=True)
    target_id = models.CharField(max_length=64, blank=True)
    target_name = models.CharField(max_length=200, db_index=True)
    details = models.JSONField(default=dict, blank=True)
    client_ip = models.GenericIPAddressField(null=True, blank=True)
    channel = models.CharField(max_length=16, choices=Channel.choices)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["actor", "created_at"])]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_name or '-'} {self.action} {self.target_name}"
