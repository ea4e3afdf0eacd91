"""Closing history rows nobody serves any more.

A row is an orphan when it is `running`, was created more than `HISTORY_ORPHAN_GRACE_S` ago,
has no history events waiting to be written, and the process serving it has not renewed its
lease (`serving_leases.py`) within that grace: its web process died, or the whole platform was
stopped mid-request. The history writer closes such rows as failed, with the reason, so no row
stays `running` forever.
"""

from __future__ import annotations

import logging
import time

from django.conf import settings

from control_plane.inference.history_apply import history_apply, moment
from control_plane.inference.history_events import row_closed
from control_plane.inference.models import InferenceRequest, Status
from control_plane.inference.redis_names import pending_all, serving_leases

log = logging.getLogger(__name__)
ORPHAN_ERROR = {
    "message": "The process serving this request stopped before it ended (its web process or the platform was "
    "stopped); the request was abandoned.",
    "type": "server_error",
    "param": None,
    "code": "serving_lost",
}


def close_orphans(client, *, limit: int = 500) -> int:
    """Close the orphaned rows (at most `limit` per call); returns how many were closed."""
    cutoff = time.time() - settings.HISTORY_ORPHAN_GRACE_S
    rows = list(
        InferenceRequest.objects.filter(status=Status.RUNNING, created_at__lt=moment(cutoff))
        .order_by("created_at")
        .values_list("pk", "request_id", "started_at")[:limit]
    )
    if not rows:
        return 0
    request_ids = [request_id for _, request_id, _ in rows]
    pipe = client.pipeline(transaction=False)
    pipe.zmscore(serving_leases(), request_ids)
    pipe.smismember(pending_all(), request_ids)
    leases, pending = pipe.execute()
    orphans = [
        (pk, request_id, started_at)
        for (pk, request_id, started_at), lease, waiting in zip(rows, leases, pending, strict=True)
        if not waiting and (lease is None or lease < cutoff)
    ]
    if not orphans:
        return 0
    closed = history_apply(
        row_closed(
            row_id=str(pk),
            started_at=started_at.timestamp() if started_at else None,
            status=Status.FAILED,
            http_status=503,
            finish_reason="error",
            error=ORPHAN_ERROR,
        )
        for pk, _, started_at in orphans
    )
    client.zrem(serving_leases(), *[request_id for _, request_id, _ in orphans])
    log.warning("closed %d running rows whose serving process is gone (e.g. %s)", closed, orphans[0][1])
    return closed
