"""Retention of request history: rows (and their artifact files) older than
`settings.HISTORY_RETENTION_DAYS` are deleted.

Periodic without Celery beat: every web process runs `cleanup()` in a background thread
at most once per `HISTORY_CLEANUP_INTERVAL_S` (triggered when a request's row closes),
and `manage.py inference_cleanup` runs it on demand (cron, CI). Deleting is idempotent,
so several processes racing on the same rows is harmless.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

log = logging.getLogger(__name__)

_lock = threading.Lock()
_next_run: float | None = None
FIRST_RUN_DELAY_S = 60.0
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
            InferenceRequest.objects.filter(created_at__lt=cutoff, status__in=FINAL_STATUSES).prefetch_related(
                "artifacts"
            )[:BATCH]
        )
        if not batch:
            return deleted
        for row in batch:
            request_delete(row)
        deleted += len(batch)


def maybe_cleanup() -> None:
    """Start a cleanup in a background thread when one is due (the first a minute after start)."""
    global _next_run
    now = time.monotonic()
    with _lock:
        if _next_run is None:
            _next_run = now + FIRST_RUN_DELAY_S
        if now < _next_run:
            return
        _next_run = now + cleanup_interval_s()
    threading.Thread(target=_cleanup_in_thread, name="history-retention", daemon=True).start()


def _cleanup_in_thread() -> None:
    try:
        removed = cleanup()
        if removed:
            log.info("history retention: deleted %d requests older than %s days", removed, retention_days())
    except Exception:
        log.exception("history retention cleanup failed")
    finally:
        close_old_connections()
