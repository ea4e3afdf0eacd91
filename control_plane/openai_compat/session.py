"""One API request from admission to its history row: the glue every /v1 route uses.

    rec = Recorder(route, request_id, caller)
    ... validate (ApiError) ...
    await rec.open(served, inputs=..., parameters=..., modalities=..., estimate=...)   # row + quota
    first, messages = await start(rec, stage_request, sampling)                        # 503/429/400 early
    outcome = await drain(first, messages, rec)  or  stream it yourself
    artifacts = await rec.complete(outcome, ...)   /  rec.fail(error)  /  rec.cancelled(outcome)

`served_view` (the decorator of every serving view) closes the row of a request that
raised before it completed, so failures are recorded too.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings

from control_plane.accounts.quota import QuotaExceeded, quota_admit, quota_refund, quota_release
from control_plane.accounts.usage import usage_record
from control_plane.inference.models import Artifact, InferenceRequest, Status
from control_plane.inference.services import artifact_add, request_close, request_open, request_started
from control_plane.openai_compat import audio_encoding
from control_plane.openai_compat.access import Caller, Served, authenticate
from control_plane.openai_compat.errors import ApiError, error_response, openai_endpoint, stage_error_to_api
from control_plane.openai_compat.outcome import Outcome, video_seconds
from control_plane.orchestrator import wire
from control_plane.orchestrator.serving import ServingUnavailable, serve
from control_plane.redis_client import get_async_redis
from stages.protocol import SamplingParams, StageRequest

log = logging.getLogger(__name__)


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def idle_timeout_s() -> float:
    return float(getattr(settings, "SERVING_IDLE_TIMEOUT_S", 120.0))


@dataclass
class Recorder:
    route: str
    request_id: str
    caller: Caller
    stream: bool = False
    served: Served | None = None
    inputs: dict[str, Any] = field(default_factory=dict)
    parameters: dict[str, Any] = field(default_factory=dict)
    modalities: list[str] = field(default_factory=list)
    row: InferenceRequest | None = None
    admission: Any = None
    closed: bool = False

    # ------------------------------------------------------------ opening

    async def open(
        self,
        served: Served,
        *,
        inputs: dict[str, Any],
        parameters: dict[str, Any],
        modalities: list[str],
        estimate: dict[str, float] | None = None,
        status: str = Status.RUNNING,
    ) -> None:
        """Write the history row (running: the request is submitted next; jobs open `queued`),
        then take the quota (a refusal is recorded as a 429)."""
        self.served, self.inputs, self.parameters, self.modalities = served, inputs, parameters, modalities
        await sync_to_async(self._open_and_admit)(status, estimate or {})

    def _open_and_admit(self, status: str, estimate: dict[str, float]) -> None:
        self._open_row(status)
        self.admission = quota_admit(user=self.caller.user, api_key=self.caller.api_key, estimate=estimate)

    def _open_row(self, status: str = Status.QUEUED) -> None:
        self.row = request_open(
            request_id=self.request_id,
            route=self.route,
            user=self.caller.user,
            api_key=self.caller.api_key,
            deployment=self.served.deployment if self.served else None,
            deployment_name=self.served.name if self.served else self.inputs.get("model", ""),
            stream=self.stream,
            inputs=self.inputs,
            parameters=self.parameters,
            modalities=self.modalities,
            status=status,
        )

    async def started(self) -> None:
        if self.row is not None and self.row.started_at is None:
            await sync_to_async(request_started)(self.row)

    # ------------------------------------------------------------ closing

    async def fail(self, error: ApiError | Exception, outcome: Outcome | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        api_error = error if isinstance(error, ApiError) else None
        if isinstance(error, QuotaExceeded):
            api_error = ApiError(429, error.message, code="rate_limit_exceeded", type=error.error_type)
        if api_error is None:
            api_error = ApiError(500, f"{type(error).__name__}: {error}", code="internal_error")
        await sync_to_async(self._close_failed)(api_error, outcome)

    def _close_failed(self, error: ApiError, outcome: Outcome | None) -> None:
        if self.row is None:
            self._open_row()
        if self.admission is not None:
            _quietly(quota_refund, self.admission)
        request_close(
            self.row,
            status=Status.FAILED,
            http_status=error.status,
            finish_reason="error",
            error=error.body()["error"],
            output_text=outcome.text if outcome else "",
            usage=outcome.usage_by_modality(self._audio_stages()) if outcome else {},
            summary_metrics=outcome.metrics if outcome else {},
        )

    async def cancelled(self, outcome: Outcome, reason: str = "the client disconnected") -> None:
        """The client went away: the serving path cancelled the request; keep what was produced."""
        if self.closed:
            return
        self.closed = True
        await sync_to_async(self._close_cancelled)(outcome, reason)

    def _close_cancelled(self, outcome: Outcome, reason: str) -> None:
        if self.admission is not None:
            _quietly(quota_release, self.admission)
        self._record_usage(outcome)
        request_close(
            self.row,
            status=Status.CANCELLED,
            http_status=499,
            finish_reason="cancelled",
            error={"message": reason, "type": "cancelled", "param": None, "code": "client_disconnected"},
            output_text=outcome.text,
            usage=outcome.usage_by_modality(self._audio_stages()),
            summary_metrics=outcome.metrics,
        )

    async def complete(
        self, outcome: Outcome, *, audio_format: str = "wav", keep_audio: bool = True, keep_media: bool = True
    ) -> list[Artifact]:
        """Store the artifacts, record usage and close the row; returns the artifacts."""
        self.closed = True
        return await sync_to_async(self._close_completed)(outcome, audio_format, keep_audio, keep_media)

    def _close_completed(self, outcome: Outcome, audio_format: str, keep_audio: bool, keep_media: bool) -> list:
        artifacts = self._store_artifacts(outcome, audio_format, keep_audio, keep_media)
        self._record_usage(outcome)
        request_close(
            self.row,
            status=Status.COMPLETED,
            http_status=200,
            finish_reason=outcome.finish_reason or (outcome.summary.finish_reason if outcome.summary else None),
            output_text=outcome.text,
            usage=outcome.usage_by_modality(self._audio_stages()),
            summary_metrics=outcome.metrics,
        )
        return artifacts

    def _store_artifacts(self, outcome: Outcome, audio_format: str, keep_audio: bool, keep_media: bool) -> list:
        artifacts = []
        audio = outcome.audio
        if keep_audio and audio is not None:
            fmt = "wav" if audio_format == "pcm16" else audio_format
            data = audio_encoding.encode_audio(audio, outcome.sample_rate, fmt)
            meta = {"sample_rate": outcome.sample_rate, "duration_s": round(outcome.audio_seconds, 4), "format": fmt}
            artifacts.append(
                artifact_add(
                    self.row,
                    kind=Artifact.Kind.AUDIO,
                    data=data,
                    mime_type=audio_encoding.MIME_TYPES[fmt],
                    extension=audio_encoding.EXTENSIONS[fmt],
                    meta=meta,
                )
            )
        if keep_media:
            counters = {"image": 0, "video": 0}
            for media in outcome.media:
                index = counters[media.kind]
                counters[media.kind] += 1
                meta = {
                    key: media.params[key]
                    for key in ("width", "height", "seed", "num_frames", "fps")
                    if key in media.params
                }
                meta["format"] = media.format
                artifacts.append(
                    artifact_add(
                        self.row,
                        kind=media.kind,
                        data=media.data,
                        mime_type=media.mime_type,
                        extension=media.format,
                        index=index,
                        meta=meta,
                    )
                )
        return artifacts

    def _record_usage(self, outcome: Outcome) -> None:
        if self.row is None or self.caller.user is None:
            return
        images = [m for m in outcome.media if m.kind == "image"]
        videos = [m for m in outcome.media if m.kind == "video"]
        modality = "video" if videos else "image" if images else "audio" if outcome.audio_chunks else "text"
        try:
            usage_record(
                request_id=self.request_id,
                user=self.caller.user,
                api_key=self.caller.api_key,
                deployment=self.served.name if self.served else "",
                modality=modality,
                admission=self.admission,
                text_tokens_in=outcome.prompt_token_count,
                text_tokens_out=outcome.completion_tokens,
                audio_seconds_out=outcome.audio_seconds,
                images=len(images),
                video_seconds=sum(video_seconds(v) for v in videos),
            )
        except Exception:  # usage bookkeeping never loses the history row
            log.exception("could not record usage of %s", self.request_id)

    def _audio_stages(self) -> list[str]:
        if self.served is None:
            return []
        return [stage.name for stage in self.served.pipeline.stages if stage.output == "audio"]


def _quietly(function, *args) -> None:
    try:
        function(*args)
    except Exception:
        log.exception("quota bookkeeping failed")


# ------------------------------------------------------------------ serving


_loop_clients: dict[tuple[int, str], Any] = {}


def loop_redis():
    """One pooled async Redis client per event loop (daphne runs one), instead of a new
    connection pool for every request."""
    loop = asyncio.get_running_loop()
    key = (id(loop), settings.REDIS_URL)
    client = _loop_clients.get(key)
    if client is None:
        client = _loop_clients[key] = get_async_redis()
    return client


class Messages:
    """The client messages of one submitted request; `aclose()` cancels it if unfinished."""

    def __init__(self, iterator: AsyncIterator[wire.ClientMessage], client):
        self._iterator = iterator
        self.client = client

    def __aiter__(self):
        return self

    async def __anext__(self) -> wire.ClientMessage:
        try:
            return await self._iterator.__anext__()
        except ServingUnavailable as error:
            raise ApiError(503, str(error), code="service_unavailable", headers={"Retry-After": "2"}) from None

    async def aclose(self) -> None:
        await self._iterator.aclose()


async def start(
    rec: Recorder,
    request: StageRequest,
    sampling: dict[str, SamplingParams] | None = None,
    *,
    idle_timeout: float | None = None,
) -> tuple[wire.ClientMessage, Messages]:
    """Submit and wait for the first message, so that admission failures (queue full, bad
    input found by the engine) still answer with a proper status before any stream starts."""
    client = loop_redis()
    timeout = idle_timeout or idle_timeout_s()
    iterator = serve(str(rec.served.deployment.id), request, sampling, idle_timeout_s=timeout, client=client)
    messages = Messages(iterator, client)
    await rec.started()
    try:
        first = await messages.__anext__()
    except BaseException:
        await messages.aclose()
        raise
    if first.kind == "fail":
        await messages.aclose()
        raise StageFailed(first)
    return first, messages


class StageFailed(Exception):
    def __init__(self, message: wire.ClientMessage):
        self.message = message
        self.api_error = stage_error_to_api(message.error)
        super().__init__(self.api_error.message)


async def drain(rec: Recorder, first: wire.ClientMessage, messages: Messages, outcome: Outcome, on_delta=None) -> None:
    """Run a request to its end, folding every output into `outcome`. Raises StageFailed."""
    async with aclosing(messages):
        message = first
        while True:
            if message.kind == "output":
                delta = await outcome.add(message.output, messages.client)
                if on_delta is not None:
                    await on_delta(delta)
            elif message.kind == "complete":
                outcome.summary = message.summary
                return
            elif message.kind == "fail":
                outcome.summary = message.summary
                outcome.error = message.error
                raise StageFailed(message)
            try:
                message = await messages.__anext__()
            except StopAsyncIteration:
                raise ApiError(503, "The request ended without a result.", code="service_unavailable") from None


# ------------------------------------------------------------------ decorator


ID_PREFIXES = {
    "chat.completions": "chatcmpl-",
    "completions": "cmpl-",
    "audio.speech": "speech-",
    "images.generations": "img-",
    "images.edits": "imgedit-",
    "videos": "video_",
}


def served_view(route: str, *methods: str):
    """An async /v1 view that serves a request: authenticates, gives the view a Recorder,
    and makes sure every failure is recorded and answered in OpenAI's shape. Every answer
    names its history row in `X-Request-Id` (`/api/requests/{id}`)."""

    def decorate(view):
        @openai_endpoint(*methods)
        @functools.wraps(view)
        async def wrapper(request, *args, **kwargs):
            caller = await authenticate(request)  # 401/403 are answered without a row
            rec = Recorder(route=route, request_id=new_id(ID_PREFIXES.get(route, "req-")), caller=caller)
            try:
                response = await view(request, rec, *args, **kwargs)
            except asyncio.CancelledError:
                if rec.row is not None and not rec.closed:
                    await asyncio.shield(rec.cancelled(Outcome()))
                raise
            except StageFailed as failed:
                await rec.fail(failed.api_error)
                response = failed.api_error.response()
            except Exception as error:
                await rec.fail(error)
                response = error_response(error)
            response.setdefault("X-Request-Id", rec.request_id)
            return with_rate_limit_headers(response, rec.admission)

        return wrapper

    return decorate


def with_rate_limit_headers(response, admission):
    """OpenAI sends x-ratelimit-* on every response, not only on 429s: here they are the
    limits as the admission found them (a refusal's 429 already carries its own). Streamed
    responses get them too: their headers go out before the first event."""
    if admission is not None:
        for name, value in admission.headers.items():
            response.setdefault(name, value)
    return response


async def relay(
    rec: Recorder,
    first: wire.ClientMessage,
    messages: Messages,
    outcome: Outcome,
    *,
    on_delta,
    on_complete,
    on_error,
    complete_options: dict[str, Any] | None = None,
):
    """Stream a request: `on_delta(delta) -> [bytes]` per output, `await on_complete(artifacts)
    -> [bytes]` at the end, `on_error(api_error) -> [bytes]` on a failure mid-stream.

    A client that disconnects closes (or cancels) this generator: leaving the loop cancels
    the request in every stage (serve's cleanup) and the row ends `cancelled`.
    """
    ended = False
    try:
        async with aclosing(messages):
            message = first
            while message.kind == "output":
                delta = await outcome.add(message.output, messages.client)
                for chunk in on_delta(delta):
                    yield chunk
                message = await messages.__anext__()
            outcome.summary = message.summary
            if message.kind == "fail":
                outcome.error = message.error
                raise StageFailed(message)
        artifacts = await rec.complete(outcome, **(complete_options or {}))
        ended = True
        for chunk in await on_complete(artifacts):
            yield chunk
    except (ApiError, StageFailed) as failure:
        error = failure.api_error if isinstance(failure, StageFailed) else failure
        await rec.fail(error, outcome)
        ended = True
        for chunk in on_error(error):
            yield chunk
    except Exception as crash:  # noqa: BLE001 - a bug must still close the row and the stream
        log.exception("stream of %s failed", rec.request_id)
        error = ApiError(500, f"The server had an error while streaming: {type(crash).__name__}", code="internal_error")
        await rec.fail(error, outcome)
        ended = True
        for chunk in on_error(error):
            yield chunk
    finally:
        if not ended:
            await rec.cancelled(outcome)
