"""The console's view of the request history (control_plane.inference): recording playground
runs through its services, and reading rows with the visibility rule of the console.

Visibility: a user sees their own requests; admins see everyone's.
"""

from __future__ import annotations

from django.db.models import Q, QuerySet

from console.access import user_is_admin
from console.media import wav_bytes
from console.playground_requests import PlaygroundRequest
from console.relay import RunRecord
from control_plane.inference import services
from control_plane.inference.models import InferenceRequest, Route, Status
from control_plane.inference.queries import request_get, request_list

ROUTES = {"chat": Route.CHAT, "image": Route.IMAGES, "speech": Route.SPEECH, "video": Route.VIDEOS}
MODALITIES = {"chat": ["text", "audio"], "image": ["image"], "speech": ["audio"], "video": ["video"]}
EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp", "video/mp4": "mp4"}


def history_open(*, user, run: PlaygroundRequest, deployment) -> InferenceRequest:
    row = services.request_open(
        request_id=run.request.request_id,
        route=ROUTES[run.mode],
        user=user,
        deployment=deployment,
        stream=True,
        inputs=run.inputs,
        parameters={**run.parameters, "source": "console"},
        modalities=run.modalities or MODALITIES[run.mode],
    )
    services.request_started(row)
    return row


def history_close(
    row: InferenceRequest,
    record: RunRecord,
    *,
    status: str,
    finish_reason: str | None = None,
    error: dict | None = None,
    metrics: dict | None = None,
    usage: dict | None = None,
) -> InferenceRequest:
    if record.pcm:
        services.artifact_add(
            row,
            kind="audio",
            data=wav_bytes(b"".join(record.pcm), record.sample_rate),
            mime_type="audio/wav",
            extension="wav",
            meta={"sample_rate": record.sample_rate, "duration_s": round(record.audio_seconds, 3)},
        )
    for index, media in enumerate(record.media):
        services.artifact_add(
            row,
            kind=media.kind,
            data=media.data,
            mime_type=media.mime_type,
            extension=EXTENSIONS.get(media.mime_type, "bin"),
            index=index,
            meta=media.params,
        )
    return services.request_close(
        row,
        status=status,
        finish_reason=finish_reason,
        error=error,
        output_text=record.output_text,
        usage=usage or {},
        summary_metrics=metrics or {},
    )


def history_search(
    user, *, text: str = "", status: str = "", route: str = "", deployment: str = "", username: str = ""
) -> QuerySet[InferenceRequest]:
    rows = request_list(viewer=user, see_all=user_is_admin(user), status=status or None, route=route or None,
                        deployment=deployment or None)  # fmt: skip
    if text:
        rows = rows.filter(Q(request_id__icontains=text) | Q(output_text__icontains=text) | Q(inputs__icontains=text))
    if username and user_is_admin(user):
        rows = rows.filter(user__username=username)
    return rows


def input_text(row: InferenceRequest) -> str:
    """The text a request was asked with: its prompt, speech input or last user message."""
    inputs = row.inputs or {}
    for key in ("prompt", "input"):
        if isinstance(inputs.get(key), str):
            return inputs[key]
    messages = inputs.get("messages") or []
    content = messages[-1].get("content", "") if messages and isinstance(messages[-1], dict) else ""
    return content if isinstance(content, str) else ""


def history_get(user, request_id: str) -> InferenceRequest | None:
    return request_get(viewer=user, see_all=user_is_admin(user), request_id=request_id)


STATUSES = Status.choices
ROUTE_CHOICES = Route.choices
