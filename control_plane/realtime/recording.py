"""History and usage of realtime sessions, through the inference and accounts services.

Each response is an InferenceRequest (route `realtime`) with the user's audio of the turn
and the audio sent back as artifacts, its text, usage and timings (`ttfp_s`: end of the
user's speech, or response.create for a manual turn, to the first audio delta). Each
response is a UsageRecord too; the session adds one for its minutes. Synchronous (ORM):
the consumer calls these through `database_sync_to_async`.
"""

from __future__ import annotations

import logging

import numpy as np

from control_plane.accounts.usage import usage_record
from control_plane.inference.models import Artifact, InferenceRequest, Route, Status
from control_plane.inference.services import artifact_add, request_close, request_open, request_started
from control_plane.realtime.conversation import wav_bytes

log = logging.getLogger(__name__)


def response_open(*, principal, deployment, response_id: str, session_id: str, inputs: dict, parameters: dict):
    row = request_open(
        request_id=response_id,
        route=Route.REALTIME,
        user=principal.user,
        api_key=principal.api_key,
        deployment=deployment,
        stream=True,
        inputs={"session_id": session_id, **inputs},
        parameters=parameters,
        modalities=parameters.get("output_modalities", []),
    )
    request_started(row)
    return row


def response_close(
    row: InferenceRequest,
    *,
    principal,
    status: str,
    output_text: str,
    usage: dict,
    metrics: dict,
    audio_in: tuple[np.ndarray, int] | None,
    audio_out: tuple[np.ndarray, int] | None,
    error: dict | None = None,
) -> None:
    for index, (direction, audio) in enumerate((("out", audio_out), ("in", audio_in))):
        if audio is not None and audio[0].size:
            samples, rate = audio
            meta = {"direction": direction, "sample_rate": rate, "duration_s": round(samples.size / rate, 4)}
            artifact_add(
                row,
                kind=Artifact.Kind.AUDIO,
                data=wav_bytes(samples, rate),
                mime_type="audio/wav",
                extension="wav",
                index=index,
                meta=meta,
            )
    final_status = {"completed": Status.COMPLETED, "cancelled": Status.CANCELLED}.get(status, Status.FAILED)
    request_close(
        row,
        status=final_status,
        http_status={Status.COMPLETED: 200, Status.CANCELLED: 499}.get(final_status, 500),
        finish_reason=status,
        error=error,
        output_text=output_text,
        usage=usage,
        summary_metrics=metrics,
    )
    try:
        usage_record(
            request_id=row.request_id,
            user=principal.user,
            api_key=principal.api_key,
            deployment=row.deployment_name,
            modality="realtime",
            text_tokens_in=int(usage.get("text", {}).get("prompt_tokens", 0)),
            text_tokens_out=int(usage.get("text", {}).get("completion_tokens", 0)),
            audio_seconds_in=float(usage.get("audio_in", {}).get("seconds", 0.0)),
            audio_seconds_out=float(usage.get("audio", {}).get("seconds", 0.0)),
        )
    except Exception:  # bookkeeping never loses the history row
        log.exception("could not record usage of %s", row.request_id)


def response_truncated(response_id: str, heard_ms: int, heard_transcript: str) -> None:
    """What the user heard of a response before cutting in (conversation.item.truncate)."""
    row = InferenceRequest.objects.filter(request_id=response_id).first()
    if row is None:
        return
    row.parameters = {**row.parameters, "heard_audio_ms": heard_ms, "heard_transcript": heard_transcript}
    InferenceRequest.objects.filter(pk=row.pk).update(parameters=row.parameters)


def session_close(*, principal, session_id: str, deployment: str, quota) -> None:
    try:
        amounts = quota.settle()
        usage_record(
            request_id=session_id,
            user=principal.user,
            api_key=principal.api_key,
            deployment=deployment,
            modality="realtime",
            realtime_minutes=float(amounts["realtime_minutes"]),
        )
    except Exception:
        log.exception("could not settle realtime session %s", session_id)
