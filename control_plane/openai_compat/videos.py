"""/v1/videos: create (multipart or JSON), list, retrieve, download content, delete.

Jobs are InferenceRequest rows (see video_jobs.py for how they run and survive a restart).
A caller sees their own jobs; admins see everyone's.
"""

from __future__ import annotations

from typing import Any

import msgspec
from asgiref.sync import sync_to_async
from django.http import FileResponse, JsonResponse
from django.utils import timezone

from control_plane.accounts.permissions import deployment_allow_list, is_admin
from control_plane.inference.errors import ApiError, openai_endpoint
from control_plane.inference.models import InferenceRequest, Route, Status
from control_plane.inference.queries import visible_requests
from control_plane.inference.request_run import RequestRun
from control_plane.inference.services import request_close
from control_plane.inference.targets import Caller, served_deployment
from control_plane.openai_compat import video_jobs
from control_plane.openai_compat.access import authenticate
from control_plane.openai_compat.bodies import convert, read_form, read_json
from control_plane.openai_compat.knobs import request_knobs
from control_plane.openai_compat.session import served_view
from control_plane.openai_compat.sizes import parse_size
from stages.diffusion_knobs import DiffusionKnobs

STATUS = {Status.QUEUED: "queued", Status.RUNNING: "in_progress", Status.COMPLETED: "completed"}
DEFAULT_FPS = 16


class VideoRequest(msgspec.Struct, kw_only=True):
    model: str
    prompt: str
    seconds: str | int | None = None
    size: str | None = None
    num_frames: int | None = None
    fps: int | None = None
    num_inference_steps: int | None = None
    guidance_scale: float | None = None
    negative_prompt: str | None = None
    seed: int | None = None
    user: str | None = None


def video_knobs(body: VideoRequest) -> DiffusionKnobs:
    """The diffusion knobs of the video; raises 400 naming the field."""
    if not body.prompt.strip():
        raise ApiError.invalid("prompt", "'prompt' cannot be empty.")
    fields: dict[str, Any] = {"output_format": "mp4", "fps": body.fps}
    if body.size:
        fields["width"], fields["height"] = parse_size(body.size)
    fps = body.fps or DEFAULT_FPS
    if not 1 <= fps <= 120:
        raise ApiError.invalid("fps", "'fps' must be between 1 and 120.")
    if body.num_frames is not None:
        if not 1 <= body.num_frames <= 1024:
            raise ApiError.invalid("num_frames", "'num_frames' must be between 1 and 1024.")
        fields["num_frames"] = body.num_frames
    elif body.seconds is not None:
        try:
            seconds = int(body.seconds)
        except ValueError:
            raise ApiError.invalid("seconds", f"'seconds' must be a whole number, got {body.seconds!r}.") from None
        if not 1 <= seconds <= 60:
            raise ApiError.invalid("seconds", "'seconds' must be between 1 and 60.")
        fields["num_frames"] = seconds * fps + 1
    if body.num_inference_steps is not None and not 1 <= body.num_inference_steps <= 200:
        raise ApiError.invalid("num_inference_steps", "'num_inference_steps' must be between 1 and 200.")
    for name in ("num_inference_steps", "guidance_scale", "negative_prompt", "seed"):
        fields[name] = getattr(body, name)
    return request_knobs(fields)


def require_video(served) -> None:
    if "video" not in served.output_modalities:
        raise ApiError(
            400,
            f"The model '{served.name}' does not generate video (it produces {served.output_modalities}).",
            param="model",
            code="unsupported_modality",
        )


async def _create_body(request) -> VideoRequest:
    if (request.content_type or "").startswith(("multipart/", "application/x-www-form-urlencoded")):
        fields, files = read_form(request)
        if "input_reference" in files:
            raise ApiError.invalid(
                "input_reference", "Reference images or videos are not supported by the video models served here."
            )
        form = {key: values[0] for key, values in fields.items() if values}
        return convert(form, VideoRequest, strict=False)
    return convert(read_json(request), VideoRequest)


@served_view(Route.VIDEOS, "POST")
async def _create(request, run: RequestRun):
    await video_jobs.recover_jobs()
    body = await _create_body(request)
    run.inputs = {"model": body.model}
    knobs = video_knobs(body)
    served = await served_deployment(run.caller, body.model, check=require_video)
    run.served = served
    parameters = {k: v for k, v in msgspec.to_builtins(body).items() if k not in ("prompt", "model") and v is not None}
    parameters["stage_params"] = knobs.fields()  # the job's knobs: a resumed job runs with them again
    parameters.setdefault("fps", body.fps or DEFAULT_FPS)
    # the row is the job: it is in the database (with its lease) before the job starts
    await run.open(served, inputs={"prompt": body.prompt}, parameters=parameters, modalities=["video"],
                   status=Status.QUEUED, lease_expires_at=video_jobs.lease_until().timestamp(), durable=True)  # fmt: skip
    video_jobs.launch(run)
    return JsonResponse(video_object(run.row))


def video_object(row: InferenceRequest, artifact=None) -> dict[str, Any]:
    params = row.parameters or {}
    stage = params.get("stage_params", {})
    meta = artifact.meta if artifact is not None else {}
    width, height = meta.get("width") or stage.get("width"), meta.get("height") or stage.get("height")
    frames, fps = meta.get("num_frames") or stage.get("num_frames"), meta.get("fps") or params.get("fps")
    seconds = params.get("seconds") or (round(frames / fps, 2) if frames and fps else None)
    error = None
    if row.status in (Status.FAILED, Status.CANCELLED):
        error = {"code": (row.error or {}).get("code") or row.status, "message": (row.error or {}).get("message", "")}
    return {
        "id": row.request_id,
        "object": "video",
        "model": row.deployment_name,
        "status": STATUS.get(row.status, "failed"),
        "progress": int(round(row.progress * 100)),
        "created_at": int(row.created_at.timestamp()),
        "completed_at": int(row.finished_at.timestamp()) if row.finished_at else None,
        "expires_at": None,
        "prompt": row.inputs.get("prompt"),
        "seconds": str(seconds) if seconds is not None else "",
        "size": f"{width}x{height}" if width and height else params.get("size", ""),
        "quality": "standard",
        "remixed_from_video_id": None,
        "error": error,
    }


def _visible(caller: Caller):
    rows = visible_requests(
        viewer=caller.user,
        see_all=is_admin(caller.user, caller.api_key),
        deployments=deployment_allow_list(caller.api_key),
    )
    return rows.filter(route=Route.VIDEOS, deleted_at__isnull=True)


def _get(caller: Caller, video_id: str):
    row = _visible(caller).filter(request_id=video_id).first()
    if row is None:
        return None, None
    return row, row.artifacts.filter(kind="video").first()


async def _job(request, video_id: str):
    caller = await authenticate(request)
    await video_jobs.recover_jobs()
    row, artifact = await sync_to_async(_get)(caller, video_id)
    if row is None:
        raise ApiError(404, f"No video job with id '{video_id}'.", param="video_id", code="video_not_found")
    return caller, row, artifact


def _list(caller: Caller, after: str | None, limit: int, order: str) -> tuple[list, bool]:
    rows = _visible(caller).order_by("created_at" if order == "asc" else "-created_at")
    if after:
        anchor = _visible(caller).filter(request_id=after).first()
        if anchor is not None:
            rows = rows.filter(**{"created_at__gt" if order == "asc" else "created_at__lt": anchor.created_at})
    page = list(rows.prefetch_related("artifacts")[: limit + 1])
    return page[:limit], len(page) > limit


async def _list_view(request):
    caller = await authenticate(request)
    await video_jobs.recover_jobs()
    try:
        limit = int(request.GET.get("limit", 20))
    except ValueError:
        raise ApiError.invalid("limit", "'limit' must be an integer.") from None
    if not 1 <= limit <= 100:
        raise ApiError.invalid("limit", "'limit' must be between 1 and 100.")
    order = request.GET.get("order", "desc")
    if order not in ("asc", "desc"):
        raise ApiError.invalid("order", "'order' must be 'asc' or 'desc'.")
    rows, has_more = await sync_to_async(_list)(caller, request.GET.get("after"), limit, order)
    data = [video_object(row, next((a for a in row.artifacts.all() if a.kind == "video"), None)) for row in rows]
    return JsonResponse({"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                         "last_id": data[-1]["id"] if data else None, "has_more": has_more})  # fmt: skip


@openai_endpoint("GET", "POST")
async def collection(request):
    if request.method == "POST":
        return await _create(request)
    return await _list_view(request)


def _delete(row: InferenceRequest) -> None:
    row.deleted_at = timezone.now()
    row.save(update_fields=["deleted_at"])
    if not row.is_final:
        error = {"message": "the video job was deleted", "type": "cancelled", "param": None, "code": "deleted"}
        request_close(row, status=Status.CANCELLED, http_status=499, finish_reason="cancelled", error=error)
    for artifact in row.artifacts.all():
        artifact.file.delete(save=False)
        artifact.delete()


@openai_endpoint("GET", "DELETE")
async def item(request, video_id: str):
    caller, row, artifact = await _job(request, video_id)
    if request.method == "DELETE":
        video_jobs.cancel_local(row.request_id)
        await sync_to_async(_delete)(row)
        return JsonResponse({"id": row.request_id, "object": "video.deleted", "deleted": True})
    return JsonResponse(video_object(row, artifact))


def _open(artifact):
    try:
        return artifact.file.open("rb")
    except (FileNotFoundError, OSError):
        return None


@openai_endpoint("GET")
async def content(request, video_id: str):
    caller, row, artifact = await _job(request, video_id)
    variant = request.GET.get("variant", "video")
    if variant != "video":
        raise ApiError.invalid("variant", f"Only the 'video' variant is available, not {variant!r}.")
    if row.status != Status.COMPLETED or artifact is None:
        raise ApiError(
            404 if row.status in (Status.FAILED, Status.CANCELLED) else 409,
            f"Video '{video_id}' is {STATUS.get(row.status, 'failed')}; its content is not available.",
            code="video_not_ready",
        )
    handle = await sync_to_async(_open)(artifact)
    if handle is None:
        raise ApiError(404, "The video file no longer exists.", code="file_not_found")
    return FileResponse(handle, content_type=artifact.mime_type, filename=f"{row.request_id}.mp4")
