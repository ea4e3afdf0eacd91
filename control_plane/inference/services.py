"""Writing request history directly, for the callers off the serving path (admin actions,
deleting a video job, tests): the same events the request runs append, applied at once.

The serving path never calls these: a request run appends its events to Redis and the
history writer applies them (request_run.py, history_log.py).
"""

from __future__ import annotations

import time
from typing import Any

from django.core.files.base import ContentFile

from control_plane.inference.history_apply import history_apply
from control_plane.inference.history_events import ArtifactStored, artifact_id, row_closed, row_opened
from control_plane.inference.models import Artifact, InferenceRequest, Status


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
    event = row_opened(request_id=request_id, route=route, user=user, api_key=api_key, deployment=deployment,
                       deployment_name=deployment_name, stream=stream, inputs=inputs, parameters=parameters,
                       modalities=modalities, status=status)  # fmt: skip
    history_apply([event])
    return InferenceRequest.objects.get(pk=event.id)


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
    """Record how the request ended. Idempotent: a row already final keeps its first ending."""
    started = row.started_at.timestamp() if row.started_at else None
    history_apply([row_closed(row_id=str(row.pk), started_at=started, status=status, http_status=http_status,
                              finish_reason=finish_reason, error=error, output_text=output_text, usage=usage,
                              summary_metrics=summary_metrics)])  # fmt: skip
    return InferenceRequest.objects.filter(pk=row.pk).first() or row


def artifact_store(
    row_id: str,
    request_id: str,
    *,
    kind: str,
    data: bytes,
    mime_type: str,
    extension: str,
    index: int = 0,
    meta: dict[str, Any] | None = None,
) -> ArtifactStored:
    """Write an artifact's bytes through Django's storage API (local disk by default, any object
    store by setting) and describe it for the history. File work only, no database."""
    storage = Artifact._meta.get_field("file").storage
    day = time.strftime("%Y/%m/%d", time.gmtime())
    name = storage.save(f"artifacts/{day}/{request_id}/{kind}-{index}.{extension}", ContentFile(data))
    return ArtifactStored(
        id=artifact_id(row_id, kind, index),
        row_id=row_id,
        kind=kind,
        index=index,
        name=name,
        mime_type=mime_type,
        size_bytes=len(data),
        meta=meta or {},
        created_at=time.time(),
    )


def artifact_add(row: InferenceRequest, **fields) -> Artifact:
    event = artifact_store(str(row.pk), row.request_id, **fields)
    history_apply([event])
    return Artifact.objects.get(pk=event.id)


def request_delete(row: InferenceRequest) -> None:
    """Delete a request with its artifacts' files."""
    for artifact in row.artifacts.all():
        artifact.file.delete(save=False)
    row.delete()
