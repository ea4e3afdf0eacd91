"""Video generation jobs: InferenceRequest rows (route `videos`) run by the web processes.

Why here and not in a separate worker: a job is an ordinary request through the serving
path (the GPU work happens on the replicas); what remains is waiting on an output stream,
which an asyncio task does for free. What makes it survive a restart is the row:

- `POST /v1/videos` writes the row (queued) with a lease and starts `run_job` in this process
  (the row is written at once, not by the history writer: the lease lives in it);
- the runner renews the lease (`LEASE_S`) while it waits, and writes progress as it arrives
  (on pooled ORM threads: the job outlives the request that started it);
- whenever any process answers a /v1/videos call it first `recover_jobs()`: a queued or
  running job whose lease ran out (its process died) is claimed by an atomic UPDATE (one
  winner) and started again from the beginning (the old serving request is gone with it);
  history still pending for such a row is written first, so a job that ended while the
  history writer lagged is not run again;
- `DELETE` marks the row; the runner that holds it notices on its next renewal and stops,
  which cancels the request in every stage.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import aclosing
from datetime import timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from control_plane.inference.errors import ApiError
from control_plane.inference.history_log import history_catch_up
from control_plane.inference.models import InferenceRequest, Route, Status
from control_plane.inference.outcome import Delta
from control_plane.inference.request_run import RequestRun
from control_plane.inference.services import request_progress
from control_plane.inference.targets import Caller, Served
from control_plane.openai_compat.knobs import request_knobs
from control_plane.orm_threads import orm_in_thread
from stages.config import load_pipeline_config
from stages.protocol import RequestOptions, StageRequest

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


def _expired():
    now = timezone.now()
    return InferenceRequest.objects.filter(
        route=Route.VIDEOS,
        status__in=(Status.QUEUED, Status.RUNNING),
        deleted_at__isnull=True,
    ).filter(Q(lease_expires_at__lt=now) | Q(lease_expires_at__isnull=True))


def _claim_expired() -> list[InferenceRequest]:
    candidates = list(_expired().values_list("request_id", flat=True)[:20])
    if not candidates:
        return []
    history_catch_up(candidates)  # a job that ended while the writer lagged is final, not expired
    claimed = []
    for row in _expired().select_related("deployment__pipeline", "user", "api_key")[:20]:
        won = InferenceRequest.objects.filter(pk=row.pk, lease_expires_at=row.lease_expires_at).update(
            lease_expires_at=lease_until(), status=Status.QUEUED
        )
        if won:
            claimed.append(row)
    return claimed


async def recover_jobs() -> None:
    """Restart jobs whose runner died (lease expired)."""
    for row in await orm_in_thread(_claim_expired)():
        if row.request_id in _running:
            continue
        run = run_for(row)
        if row.attempts >= MAX_ATTEMPTS or row.deployment is None:
            reason = "the job was interrupted too many times" if row.deployment else "its deployment was deleted"
            await run.fail(ApiError(503, f"Video generation failed: {reason}.", code="job_interrupted"))
            continue
        log.info("resuming video job %s (attempt %d)", row.request_id, row.attempts + 1)
        launch(run)


def run_for(row: InferenceRequest) -> RequestRun:
    served = None
    if row.deployment is not None:
        served = Served(row.deployment, load_pipeline_config(row.deployment.pipeline.config))
    return RequestRun.resume(row, Caller(row.user, row.api_key), served)


def launch(run: RequestRun) -> None:
    request_id = run.request_id
    task = asyncio.get_running_loop().create_task(run_job(run), name=f"video {request_id}")
    _running[request_id] = task
    task.add_done_callback(lambda _: _running.pop(request_id, None))


def cancel_local(request_id: str) -> None:
    task = _running.get(request_id)
    if task is not None:
        task.cancel()


async def run_job(run: RequestRun) -> None:
    row = run.row
    prompt = row.inputs.get("prompt", "")
    text_input = (
        {"messages": [{"role": "user", "content": prompt}]}
        if run.served.pipeline.needs_chat_template
        else {"prompt": prompt}
    )
    last_write = [0.0]

    async def on_delta(delta: Delta) -> None:
        if delta.progress is None:
            return
        now = time.monotonic()
        if now - last_write[0] < PROGRESS_WRITE_INTERVAL_S:
            return
        last_write[0] = now
        await orm_in_thread(request_progress)(row, min(delta.progress, 0.99))
        if not await orm_in_thread(_renew)(row.pk):
            raise JobGone()

    renewer = asyncio.get_running_loop().create_task(_keep_lease(row.pk, asyncio.current_task()))
    try:
        knobs = request_knobs(row.parameters.get("stage_params", {}))
        request = StageRequest(request_id=f"{row.request_id}-a{row.attempts + 1}", options=RequestOptions(diffusion=knobs),
                               arrival_time=time.time(), **text_input)  # fmt: skip
        deltas = await run.submit(request, idle_timeout=JOB_IDLE_TIMEOUT_S)
        async with aclosing(deltas):
            async for delta in deltas:
                await on_delta(delta)
        if not any(m.kind == "video" for m in run.outcome.media):
            raise ApiError(500, "The model produced no video.", code="no_video")
        await run.complete()
    except ApiError as failed:
        await run.fail(failed)
    except (JobGone, asyncio.CancelledError):
        run.stopping("the video job was deleted", "deleted")
        await asyncio.shield(run.cancel())
    except Exception as error:  # noqa: BLE001 - a job never dies silently
        log.exception("video job %s failed", row.request_id)
        await run.fail(ApiError(500, str(error), code="job_failed"))
    finally:
        renewer.cancel()


async def _keep_lease(row_id, job: asyncio.Task) -> None:
    """Renew the lease while the job waits; stop the job when its row was deleted."""
    while True:
        await asyncio.sleep(LEASE_S / 3)
        if not await orm_in_thread(_renew)(row_id):
            job.cancel()
            return
