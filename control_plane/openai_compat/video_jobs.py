"""Video generation jobs: InferenceRequest rows (route `videos`) run by the web processes.

Why here and not in a separate worker: a job is an ordinary request through the serving
path (the GPU work happens on the replicas); what remains is waiting on an output stream,
which an asyncio task does for free. What makes it survive a restart is the row:

- `POST /v1/videos` writes the row (queued) with a lease and starts `run_job` in this process;
- the runner renews the lease (`LEASE_S`) while it waits, and writes progress as it arrives;
- whenever any process answers a /v1/videos call it first `recover_jobs()`: a queued or
  running job whose lease ran out (its process died) is claimed by an atomic UPDATE (one
  winner) and started again from the beginning (the old serving request is gone with it);
- `DELETE` marks the row; the runner that holds it notices on its next renewal and stops,
  which cancels the request in every stage.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db.models import Q
from django.utils import timezone

from control_plane.inference.models import InferenceRequest, Route, Status
from control_plane.inference.services import request_progress
from control_plane.openai_compat.access import Caller, Served
from control_plane.openai_compat.errors import ApiError
from control_plane.openai_compat.outcome import Delta, Outcome
from control_plane.openai_compat.session import Recorder, StageFailed, drain, start
from stages.config import load_pipeline_config
from stages.protocol import StageRequest

log = logging.getLogger(__name__)

LEASE_S = 30.0
MAX_ATTEMPTS = 3
PROGRESS_WRITE_INTERVAL_S = 0.5
JOB_IDLE_TIMEOUT_S = 900.0  # a long video may denoise a while between outputs
_running: dict[str, asyncio.Task] = {}


class JobGone(Exception):
    """The job was deleted (or finished elsewhere) while this process ran it."""


def lease_until() -> Any:
    return timezone.now() + timedelta(seconds=LEASE_S)


def _renew(row_id) -> bool:
    """Extend the lease; False when the job was deleted or closed meanwhile."""
    return bool(
        InferenceRequest.objects.filter(
            pk=row_id, status__in=(Status.QUEUED, Status.RUNNING), deleted_at__isnull=True
        ).update(lease_expires_at=lease_until())
    )


def _claim_expired() -> list[InferenceRequest]:
    now = timezone.now()
    stale = InferenceRequest.objects.filter(
        route=Route.VIDEOS,
        status__in=(Status.QUEUED, Status.RUNNING),
        deleted_at__isnull=True,
    ).filter(Q(lease_expires_at__lt=now) | Q(lease_expires_at__isnull=True))
    claimed = []
    for row in stale.select_related("deployment__pipeline", "user", "api_key")[:20]:
        won = InferenceRequest.objects.filter(pk=row.pk, lease_expires_at=row.lease_expires_at).update(
            lease_expires_at=lease_until(), status=Status.QUEUED
        )
        if won:
            claimed.append(row)
    return claimed


async def recover_jobs() -> None:
    """Restart jobs whose runner died (lease expired)."""
    for row in await sync_to_async(_claim_expired)():
        if row.request_id in _running:
            continue
        if row.attempts >= MAX_ATTEMPTS or row.deployment is None:
            rec = recorder_for(row)
            reason = "the job was interrupted too many times" if row.deployment else "its deployment was deleted"
            await rec.fail(ApiError(503, f"Video generation failed: {reason}.", code="job_interrupted"))
            continue
        log.info("resuming video job %s (attempt %d)", row.request_id, row.attempts + 1)
        launch(row)


def recorder_for(row: InferenceRequest) -> Recorder:
    served = None
    if row.deployment is not None:
        served = Served(row.deployment, load_pipeline_config(row.deployment.pipeline.config))
    rec = Recorder(route=Route.VIDEOS, request_id=row.request_id, caller=Caller(row.user, row.api_key))
    rec.served, rec.row, rec.inputs, rec.parameters = served, row, row.inputs, row.parameters
    rec.modalities = ["video"]
    return rec


def launch(row: InferenceRequest, rec: Recorder | None = None) -> None:
    task = asyncio.get_running_loop().create_task(run_job(rec or recorder_for(row)), name=f"video {row.request_id}")
    _running[row.request_id] = task
    task.add_done_callback(lambda _: _running.pop(row.request_id, None))


def cancel_local(request_id: str) -> None:
    task = _running.get(request_id)
    if task is not None:
        task.cancel()


async def run_job(rec: Recorder) -> None:
    row = rec.row
    params = dict(row.parameters.get("stage_params", {}))
    prompt = row.inputs.get("prompt", "")
    text_input = (
        {"messages": [{"role": "user", "content": prompt}]}
        if rec.served.pipeline.needs_chat_template
        else {"prompt": prompt}
    )
    attempt = row.attempts + 1
    request = StageRequest(
        request_id=f"{row.request_id}-a{attempt}", params=params, arrival_time=time.time(), **text_input
    )
    outcome = Outcome()
    last_write = [0.0]

    async def on_delta(delta: Delta) -> None:
        if delta.progress is None:
            return
        now = time.monotonic()
        if now - last_write[0] < PROGRESS_WRITE_INTERVAL_S:
            return
        last_write[0] = now
        await sync_to_async(request_progress)(row, min(delta.progress, 0.99))
        if not await sync_to_async(_renew)(row.pk):
            raise JobGone()

    renewer = asyncio.get_running_loop().create_task(_keep_lease(row.pk, asyncio.current_task()))
    try:
        row.started_at = None  # a resumed job starts over
        first, replies = await start(rec, request, idle_timeout=JOB_IDLE_TIMEOUT_S)
        await drain(rec, first, replies, outcome, on_delta=on_delta)
        if not any(m.kind == "video" for m in outcome.media):
            raise ApiError(500, "The model produced no video.", code="no_video")
        await rec.complete(outcome)
    except StageFailed as failed:
        await rec.fail(failed.api_error, outcome)
    except (JobGone, asyncio.CancelledError):
        await asyncio.shield(rec.cancelled(outcome, "the video job was deleted"))
    except Exception as error:  # noqa: BLE001 - a job never dies silently
        log.exception("video job %s failed", row.request_id)
        await rec.fail(error if isinstance(error, ApiError) else ApiError(500, str(error), code="job_failed"), outcome)
    finally:
        renewer.cancel()


async def _keep_lease(row_id, job: asyncio.Task) -> None:
    """Renew the lease while the job waits; stop the job when its row was deleted."""
    while True:
        await asyncio.sleep(LEASE_S / 3)
        if not await sync_to_async(_renew)(row_id):
            job.cancel()
            return
