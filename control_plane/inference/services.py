"""Writing request history: open a row when a request arrives, close it when it ends.

Every function is synchronous (ORM); the async views call them through `sync_to_async`.
Closing a row also feeds the Prometheus counters (metrics.py).
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.files.base import ContentFile
from django.utils import timezone

from control_plane.inference import metrics
from control_plane.inference.models import FINAL_STATUSES, Artifact, InferenceRequest, Status

log = logging.getLogger(__name__)

_CLOSE_FIELDS = ("status", "http_status", "finish_reason", "error", "output_text", "usage", "finished_at",
                 "lease_expires_at", "progress", "queue_s", "ttft_s", "tpot_s", "ttfp_s", "e2el_s", "rtf",
                 "stage_metrics")  # fmt: skip
_TIMING_FIELDS = {"queue_s": "queue_s", "ttft_s": "ttft_s", "tpot_s": "tpot_s", "ttfp_s": "ttfp_s", "e2el_s": "e2el_s"}


def request_open(
    *,
    request_id: str,
    route: str,
    user=None,
    api_key=None,
    deployment=None,
    deployment_name: str = "",
    stream: bool = False,
    inputs: dict[str, Any] | None = None,
    parameters: dict[str, Any] | None = None,
    modalities: list[str] | None = None,
    status: str = Status.QUEUED,
) -> InferenceRequest:
    running = status == Status.RUNNING
    return InferenceRequest.objects.create(
        status=status,
        started_at=timezone.now() if running else None,
        attempts=1 if running else 0,
        request_id=request_id,
        route=route,
        user=user if getattr(user, "is_authenticated", False) else None,
        api_key=api_key,
        deployment=deployment,
        deployment_name=deployment_name or getattr(deployment, "name", ""),
        stream=stream,
        inputs=inputs or {},
        parameters=parameters or {},
        modalities=modalities_field(modalities or []),
    )


def modalities_field(modalities: list[str]) -> str:
    return "," + ",".join(modalities) + "," if modalities else ""


def request_started(row: InferenceRequest) -> None:
    row.status = Status.RUNNING
    row.started_at = timezone.now()
    row.attempts += 1
    row.save(update_fields=["status", "started_at", "attempts"])


def request_progress(row: InferenceRequest, progress: float) -> None:
    row.progress = max(0.0, min(1.0, progress))
    InferenceRequest.objects.filter(pk=row.pk).update(progress=row.progress)


def request_close(
    row: InferenceRequest,
    *,
    status: str,
    http_status: int | None = None,
    finish_reason: str | None = None,
    error: dict[str, Any] | None = None,
    output_text: str = "",
    usage: dict[str, Any] | None = None,
    summary_metrics: dict[str, float] | None = None,
) -> InferenceRequest:
    """Record how the request ended. Idempotent: a row already final keeps its first ending.

    One conditional UPDATE (no read-then-write transaction), so it never deadlocks SQLite's
    writers in the embedded mode and two closers cannot both win.
    """
    row.status = status
    row.http_status = http_status
    row.finish_reason = finish_reason or ""
    row.error = error
    row.output_text = output_text
    row.usage = usage or {}
    row.finished_at = timezone.now()
    row.lease_expires_at = None
    if status == Status.COMPLETED:
        row.progress = 1.0
    apply_summary(row, summary_metrics or {})
    fields = {name: getattr(row, name) for name in _CLOSE_FIELDS}
    won = InferenceRequest.objects.filter(pk=row.pk).exclude(status__in=FINAL_STATUSES).update(**fields)
    if not won:
        return InferenceRequest.objects.filter(pk=row.pk).first() or row
    try:
        metrics.observe(row)
    except Exception:  # metrics never break serving
        log.exception("could not record metrics of %s", row.request_id)
    return row


def apply_summary(row: InferenceRequest, summary: dict[str, float]) -> None:
    """Timings from the orchestrator's RequestSummary.metrics (see stages/orchestrator/metrics.py)."""
    for key, field in _TIMING_FIELDS.items():
        if key in summary:
            setattr(row, field, float(summary[key]))
    if "rtf" in summary:
        row.rtf = float(summary["rtf"])
    stages: dict[str, dict[str, float]] = {}
    for key, value in summary.items():
        if key.startswith("stage."):
            _, name, measure = key.split(".", 2)
            stages.setdefault(name, {})[measure] = float(value)
    if stages:
        row.stage_metrics = stages
    if row.e2el_s is None and row.started_at is not None:
        row.e2el_s = (timezone.now() - row.started_at).total_seconds()


def artifact_add(
    row: InferenceRequest,
    *,
    kind: str,
    data: bytes,
    mime_type: str,
    extension: str,
    index: int = 0,
    meta: dict[str, Any] | None = None,
) -> Artifact:
    """Store the bytes through Django's storage API (local disk by default, any object store by setting)."""
    artifact = Artifact(request=row, kind=kind, index=index, mime_type=mime_type, size_bytes=len(data), meta=meta or {})
    artifact.file.save(f"{kind}-{index}.{extension}", ContentFile(data), save=False)
    artifact.save()
    return artifact


def request_delete(row: InferenceRequest) -> None:
    """Delete a request with its artifacts' files."""
    for artifact in row.artifacts.all():
        artifact.file.delete(save=False)
    row.delete()
