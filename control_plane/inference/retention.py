"""Retention of request history: rows (and their artifact files) older than
`settings.HISTORY_RETENTION_DAYS` are deleted, except the rows holding a custom voice (its clip and
conditioning; deleting the voice deletes them).

`cleanup()` runs periodically in the orchestrator (retention_schedule.py: one orchestrator
per `HISTORY_CLEANUP_INTERVAL_S`, under a Redis lease) and on demand through `manage.py
inference_cleanup` (cron, CI). Deleting is idempotent, so two runs racing on the same rows
are harmless.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

BATCH = 500


def retention_days() -> float:
    return float(getattr(settings, "HISTORY_RETENTION_DAYS", 30))


def cleanup_interval_s() -> float:
    return float(getattr(settings, "HISTORY_CLEANUP_INTERVAL_S", 3600))


def cleanup(*, older_than_days: float | None = None, now=None) -> int:
    """Delete requests created before the retention window, with their files. Returns how many."""
    from control_plane.inference.models import FINAL_STATUSES, InferenceRequest
    from control_plane.inference.services import request_delete

    days = retention_days() if older_than_days is None else older_than_days
    if days <= 0:
        return 0  # 0 keeps everything
    cutoff = (now or timezone.now()) - timedelta(days=days)
    deleted = 0
    while True:
        batch = list(
            InferenceRequest.objects.filter(created_at__lt=cutoff, status__in=FINAL_STATUSES)
            .filter(custom_voice__isnull=True)  # a custom voice's clip and conditioning live as long as it
            .prefetch_related("artifacts")[:BATCH]
        )
        if not batch:
            return deleted
        for row in batch:
            request_delete(row)
        deleted += len(batch)
