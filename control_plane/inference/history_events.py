"""What happens to a history row, as events: a row opens, starts, closes; an artifact is stored;
a usage record is written; parameters are added later (what a realtime listener heard).

The request path builds these (no database), appends them to Redis (history_log.py), and the
history writer applies them (history_apply.py). Each event is idempotent on its own: an open
inserts a row only if its id is new, a close updates only a row that is not final yet, an
artifact and a usage record carry their own unique keys. Times are UNIX seconds.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import msgspec

from control_plane.inference.models import Status


class RowOpened(msgspec.Struct, kw_only=True, tag="open"):
    id: str
    request_id: str
    route: str
    user_id: int | None = None
    api_key_id: int | None = None
    deployment_id: str | None = None
    deployment_name: str = ""
    stream: bool = False
    inputs: dict[str, Any] = {}
    parameters: dict[str, Any] = {}
    modalities: str = ""
    status: str = Status.QUEUED
    created_at: float
    started_at: float | None = None
    attempts: int = 0
    lease_expires_at: float | None = None


class RowStarted(msgspec.Struct, kw_only=True, tag="start"):
    row_id: str
    started_at: float
    attempts: int


class RowClosed(msgspec.Struct, kw_only=True, tag="close"):
    row_id: str
    status: str
    http_status: int | None = None
    finish_reason: str = ""
    error: dict[str, Any] | None = None
    output_text: str = ""
    usage: dict[str, Any] = {}
    finished_at: float
    progress: float | None = None
    queue_s: float | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    ttfp_s: float | None = None
    e2el_s: float | None = None
    rtf: float | None = None
    stage_metrics: dict[str, dict[str, float | list[float]]] = {}
    """Per stage: started_s, duration_s, first_output_s, outputs, and `output_marks_s` (a list)."""


class ArtifactStored(msgspec.Struct, kw_only=True, tag="artifact"):
    id: str
    row_id: str
    kind: str
    index: int = 0
    name: str
    """The file's name in the artifacts' storage (already written)."""
    mime_type: str
    size_bytes: int
    meta: dict[str, Any] = {}
    created_at: float


class UsageRecorded(msgspec.Struct, kw_only=True, tag="usage"):
    request_id: str
    user_id: int | None = None
    api_key_id: int | None = None
    deployment: str = ""
    modality: str
    amounts: dict[str, float]
    created_at: float


class ParametersAdded(msgspec.Struct, kw_only=True, tag="parameters"):
    request_id: str
    parameters: dict[str, Any]


HistoryEvent = RowOpened | RowStarted | RowClosed | ArtifactStored | UsageRecorded | ParametersAdded
ORDER = {RowOpened: 0, RowStarted: 1, ParametersAdded: 2, ArtifactStored: 3, RowClosed: 4, UsageRecorded: 5}

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(HistoryEvent)


def encode(event: HistoryEvent) -> bytes:
    return _encoder.encode(event)


def decode(data: bytes) -> HistoryEvent:
    return _decoder.decode(data)


def modalities_field(modalities: list[str]) -> str:
    return "," + ",".join(modalities) + "," if modalities else ""


def row_opened(
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
    lease_expires_at: float | None = None,
) -> RowOpened:
    now = time.time()
    running = status == Status.RUNNING
    return RowOpened(
        id=str(uuid.uuid4()),
        request_id=request_id,
        route=route,
        user_id=user.pk if getattr(user, "is_authenticated", False) else None,
        api_key_id=getattr(api_key, "pk", None),
        deployment_id=str(deployment.pk) if deployment is not None else None,
        deployment_name=deployment_name or getattr(deployment, "name", ""),
        stream=stream,
        inputs=inputs or {},
        parameters=parameters or {},
        modalities=modalities_field(modalities or []),
        status=status,
        created_at=now,
        started_at=now if running else None,
        attempts=1 if running else 0,
        lease_expires_at=lease_expires_at,
    )


TIMINGS = ("queue_s", "ttft_s", "tpot_s", "ttfp_s", "e2el_s", "rtf")


def row_closed(
    *,
    row_id: str,
    started_at: float | None,
    status: str,
    http_status: int | None = None,
    finish_reason: str | None = None,
    error: dict[str, Any] | None = None,
    output_text: str = "",
    usage: dict[str, Any] | None = None,
    summary_metrics: dict[str, float] | None = None,
    output_marks: dict[str, list[float]] | None = None,
) -> RowClosed:
    """How a request ended, with its timings from the orchestrator's RequestSummary.metrics
    (see stages/orchestrator/metrics.py); E2EL from the row's start when the summary has none.
    `output_marks` (RequestSummary.output_marks) go with each stage's timings as `output_marks_s`."""
    now = time.time()
    metrics = summary_metrics or {}
    timings = {name: float(metrics[name]) for name in TIMINGS if name in metrics}
    if "e2el_s" not in timings and started_at is not None:
        timings["e2el_s"] = max(0.0, now - started_at)
    stages: dict[str, dict[str, float]] = {}
    for key, value in metrics.items():
        if key.startswith("stage."):
            _, name, measure = key.split(".", 2)
            stages.setdefault(name, {})[measure] = float(value)
    for name, marks in (output_marks or {}).items():
        if name in stages:
            stages[name]["output_marks_s"] = [float(mark) for mark in marks]
    return RowClosed(
        row_id=row_id,
        status=status,
        http_status=http_status,
        finish_reason=finish_reason or "",
        error=error,
        output_text=output_text,
        usage=usage or {},
        finished_at=now,
        progress=1.0 if status == Status.COMPLETED else None,
        stage_metrics=stages,
        **timings,
    )


def artifact_id(row_id: str, kind: str, index: int) -> str:
    """The same artifact of a row always gets the same id, so storing it twice stores it once."""
    return str(uuid.uuid5(uuid.UUID(row_id), f"{kind}-{index}"))
