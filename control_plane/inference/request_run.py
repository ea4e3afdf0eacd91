"""One request from admission to its history row: the lifecycle every interface drives.

    run = RequestRun(route=..., request_id=..., caller=...)
    await run.open(served, inputs=..., parameters=..., modalities=..., estimate=...)  # history row, quota
    deltas = await run.submit(stage_request, later_sampling)    # 503/429/400 answer before any byte streams
    async for delta in deltas: ...                               # each output folded into run.outcome
    await run.complete(...)  |  await run.fail(error)  |  await run.cancel(reason)

or, for an interface that streams, `run.events(deltas, on_delta=..., on_complete=..., on_error=...)`
does the loop and the ending (a consumer that stops iterating cancels the request).

The /v1 views, the realtime responses and the console playgrounds are renderers of the
deltas and of the ending; what is billed, recorded and settled is decided here, once:
- the history row opens before the quota is asked (a refusal is recorded as a 429) and ends
  exactly once: `completed`, `failed` (with the OpenAI error), or `cancelled` (499);
- usage is the outcome's (`Outcome.usage`): the entry stage's prompt and completion tokens,
  audio seconds out (and in, for realtime), images, video seconds;
- a completed or cancelled request is charged what it produced (its usage record, and its
  quota admission settled with those amounts); a failed one is refunded and has no record;
- history events go to Redis in one round trip per step (history_log.py); the history writer
  puts them in the database off the request path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import aclosing
from typing import Any

import numpy as np
from asgiref.sync import sync_to_async
from django.conf import settings

from control_plane.accounts.quota import aquota_admit, aquota_refund, aquota_settle
from control_plane.accounts.usage import usage_entry, usage_quota_amounts
from control_plane.inference import audio_encoding
from control_plane.inference.audio_limits import capped_later_sampling
from control_plane.inference.errors import ApiError, as_api_error, stage_error_to_api
from control_plane.inference.history_apply import moment
from control_plane.inference.history_events import (
    ArtifactStored,
    HistoryEvent,
    RowOpened,
    RowStarted,
    UsageRecorded,
    row_closed,
    row_opened,
)
from control_plane.inference.history_log import history_append, history_catch_up
from control_plane.inference.models import InferenceRequest, Route, Status
from control_plane.inference.outcome import Delta, Outcome, Usage
from control_plane.inference.prompt_bound import prompt_overflow
from control_plane.inference.services import artifact_store
from control_plane.inference.serving_leases import leases_for
from control_plane.inference.targets import Caller, Served
from control_plane.orchestrator import wire
from control_plane.orchestrator.serving import ServingUnavailable, serve
from control_plane.orm_threads import orm_in_thread
from control_plane.redis_client import shared_async_redis
from stages.protocol import SamplingParams, StageError, StageRequest

log = logging.getLogger(__name__)
MEDIA_META = ("width", "height", "seed", "num_frames", "fps")


def idle_timeout_s() -> float:
    return float(getattr(settings, "SERVING_IDLE_TIMEOUT_S", 120.0))


_loop_clients: dict[tuple[int, str], Any] = {}


def loop_redis():
    """One pooled async Redis client per event loop (daphne runs one), instead of a new
    connection pool for every request; its pool waits for a free connection when every one
    is busy (hundreds of concurrent requests each append their history)."""
    loop = asyncio.get_running_loop()
    key = (id(loop), settings.REDIS_URL)
    client = _loop_clients.get(key)
    if client is None:
        client = _loop_clients[key] = shared_async_redis(settings.REDIS_URL)
    return client


# ------------------------------------------------------------------ quota


class RequestCharge:
    """The quota of one request: reserved at open, settled with what it used, refunded on failure.
    Bookkeeping failures (the quota store down) are logged: they never lose the history row."""

    def __init__(self, caller: Caller):
        self.caller = caller
        self.admission = None

    async def admit(self, estimate: dict[str, float]) -> None:
        self.admission = await aquota_admit(user=self.caller.user, api_key=self.caller.api_key, estimate=estimate)

    async def settle(self, usage: Usage) -> None:
        if self.admission is not None:
            await _quietly(aquota_settle(self.admission, usage_quota_amounts(usage.record())))

    async def refund(self) -> None:
        if self.admission is not None:
            await _quietly(aquota_refund(self.admission))

    @property
    def headers(self) -> dict[str, str]:
        """x-ratelimit-* as the admission found them."""
        return self.admission.headers if self.admission is not None else {}


async def _quietly(bookkeeping: Awaitable) -> None:
    try:
        await bookkeeping
    except Exception:
        log.exception("quota bookkeeping failed")


# ------------------------------------------------------------------ outputs


class Deltas:
    """The outputs of one submitted request, each folded into its outcome as it is read.

    Iterating ends when the request completes; a failure raises its ApiError. Closing early
    (`aclose`, or leaving an `aclosing` block) cancels the request in every stage."""

    def __init__(self, messages: AsyncIterator[wire.ClientMessage], outcome: Outcome, client):
        self.messages = messages
        self.outcome = outcome
        self.client = client
        self.waiting: wire.ClientMessage | None = None
        self.done = False

    async def first(self) -> None:
        """Wait for the first message, so that a refusal (queue full, bad input found by the
        engine, no replica) answers with a status before any stream starts."""
        try:
            self.waiting = await self._next()
            if self.waiting.kind == "fail":
                await self._end(self.waiting)
        except BaseException:
            await self.aclose()
            raise

    def __aiter__(self):
        return self

    async def __anext__(self) -> Delta:
        if self.done:
            raise StopAsyncIteration
        message, self.waiting = self.waiting or await self._next(), None
        if message.kind == "output":
            return await self.outcome.add(message.output, self.client)
        await self._end(message)
        raise StopAsyncIteration

    async def _next(self) -> wire.ClientMessage:
        try:
            return await self.messages.__anext__()
        except ServingUnavailable as error:
            raise as_api_error(error) from None
        except StopAsyncIteration:
            raise ApiError(503, "The request ended without a result.", code="service_unavailable") from None

    async def _end(self, message: wire.ClientMessage) -> None:
        self.done = True
        self.outcome.summary = message.summary
        await self.aclose()
        if message.kind == "fail":
            self.outcome.error = message.error
            raise stage_error_to_api(message.error or StageError(message="the request failed"))

    async def drain(self) -> Outcome:
        async with aclosing(self):
            async for _ in self:
                pass
        return self.outcome

    async def aclose(self) -> None:
        await self.messages.aclose()


# ------------------------------------------------------------------ the run


class RequestRun:
    def __init__(self, *, route: str, request_id: str, caller: Caller, charge=None):
        self.route = route
        self.request_id = request_id
        self.caller = caller
        self.charge = charge or RequestCharge(caller)
        self.served: Served | None = None
        self.opened: RowOpened | None = None
        self.outcomes: list[Outcome] = []
        self.inputs: dict[str, Any] = {}
        """What is known of the request before it opens (its `model`), for the row of an early refusal."""
        self.audio_in: tuple[np.ndarray, int] | None = None
        """What the user said (realtime): kept as an artifact and counted as audio in."""
        self.metrics: dict[str, float] = {}
        """Timings the interface measured itself, over the orchestrator's (realtime's TTFP from the turn)."""
        self.stop_reason = ("the client disconnected", "client_disconnected")
        """Why a cancellation happens: (message, code) of the row's error."""
        self.ended = False

    @classmethod
    def resume(cls, row: InferenceRequest, caller: Caller, served: Served | None) -> RequestRun:
        """A run for a row that is already in the database (a video job picked up again)."""
        run = cls(route=row.route, request_id=row.request_id, caller=caller)
        run.served = served
        run.opened = RowOpened(
            id=str(row.pk), request_id=row.request_id, route=row.route, user_id=row.user_id,
            api_key_id=row.api_key_id, deployment_id=str(row.deployment_id) if row.deployment_id else None,
            deployment_name=row.deployment_name, stream=row.stream, inputs=row.inputs, parameters=row.parameters,
            modalities=row.modalities, status=row.status, created_at=row.created_at.timestamp(),
            started_at=None, attempts=row.attempts,
        )  # fmt: skip
        return run

    # ------------------------------------------------------------ opening

    async def open(
        self,
        served: Served | None,
        *,
        inputs: dict[str, Any],
        parameters: dict[str, Any],
        modalities: list[str],
        stream: bool = False,
        estimate: dict[str, float] | None = None,
        status: str = Status.RUNNING,
        lease_expires_at: float | None = None,
        durable: bool = False,
    ) -> None:
        """Open the history row (running: the request is submitted next; jobs open `queued`),
        then take the quota (QuotaExceeded and QuotaUnavailable propagate; `fail` records them).
        `durable`: the row is in the database when this returns (a job's row carries its lease)."""
        self.served, self.inputs = served, inputs
        self.opened = row_opened(
            request_id=self.request_id, route=self.route, user=self.caller.user, api_key=self.caller.api_key,
            deployment=served.deployment if served else None, stream=stream, inputs=inputs, parameters=parameters,
            modalities=modalities, status=status, lease_expires_at=lease_expires_at,
        )  # fmt: skip
        await self._append([self.opened], lease=self._lease_while_running())
        if durable:
            await orm_in_thread(history_catch_up)([self.request_id])
        await self.charge.admit(estimate or {})

    @property
    def row(self) -> InferenceRequest:
        """The history row as it is being written (not read from the database)."""
        opened = self.opened
        return InferenceRequest(
            id=opened.id, request_id=opened.request_id, route=opened.route, user_id=opened.user_id,
            api_key_id=opened.api_key_id, deployment_name=opened.deployment_name, stream=opened.stream,
            inputs=opened.inputs, parameters=opened.parameters, modalities=opened.modalities, status=opened.status,
            created_at=moment(opened.created_at), started_at=moment(opened.started_at), attempts=opened.attempts,
        )  # fmt: skip

    # ------------------------------------------------------------ serving

    async def submit(
        self,
        request: StageRequest,
        later_sampling: dict[str, SamplingParams] | None = None,
        *,
        idle_timeout: float | None = None,
    ) -> Deltas:
        """Submit to the served deployment and wait for the first message (see Deltas.first).
        A request of several submissions (n images) folds each into an outcome of its own."""
        self._check_prompt_bound(request)
        client = loop_redis()
        outcome = Outcome()
        self.outcomes.append(outcome)  # before any await: submissions keep their order
        await self._started()
        later_sampling = capped_later_sampling(self.served, request, later_sampling)
        messages = serve(str(self.served.deployment.id), request, later_sampling,
                         idle_timeout_s=idle_timeout or idle_timeout_s(), client=client,
                         parent_trace=self.caller.trace)  # fmt: skip
        deltas = Deltas(messages, outcome, client)
        await deltas.first()
        return deltas

    def _check_prompt_bound(self, request: StageRequest) -> None:
        """A prompt longer than the entry stage's context surely is never sent to a replica."""
        max_length = self.served.deploy.for_stage(self.served.pipeline.entry_stage).max_length
        overflow = prompt_overflow(request, max_length, settings.PROMPT_MAX_CHARS_PER_TOKEN)
        if overflow:
            param = "messages" if request.messages else "prompt"
            raise ApiError(400, f"Invalid '{param}': {overflow}.", param=param, code="context_length_exceeded")

    async def _started(self) -> None:
        if self.opened is not None and self.opened.started_at is None:
            self.opened.started_at = time.time()
            self.opened.attempts += 1
            self.opened.status = Status.RUNNING
            started = RowStarted(
                row_id=self.opened.id, started_at=self.opened.started_at, attempts=self.opened.attempts
            )
            await self._append([started], lease=self._lease_while_running())

    @property
    def outcome(self) -> Outcome:
        if len(self.outcomes) == 1:
            return self.outcomes[0]
        merged = Outcome()
        for outcome in self.outcomes:
            merged.merge(outcome)
        return merged

    def usage(self) -> Usage:
        stages = self.served.audio_token_stages if self.served else []
        audio_in = self.audio_in[0].size / self.audio_in[1] if self.audio_in else 0.0
        return self.outcome.usage(stages, audio_in)

    # ------------------------------------------------------------ ending

    async def complete(
        self, *, audio_format: str = "wav", keep_audio: bool = True, keep_media: bool = True
    ) -> list[ArtifactStored]:
        """Store the artifacts, record the usage, settle the quota and close the row `completed`."""
        if self.ended:
            return []
        outcome = self.outcome
        usage = self.usage()
        artifacts = []
        if self._has_files(outcome, keep_audio, keep_media):  # files are written on a thread
            artifacts = await sync_to_async(self._store_artifacts, thread_sensitive=False)(
                outcome, audio_format, keep_audio, keep_media
            )
        closed = self._closed(Status.COMPLETED, 200, outcome.ending_reason, None, usage)
        await self._end([*artifacts, closed, self._usage_record(usage)])
        await self.charge.settle(usage)
        return artifacts

    async def fail(self, error: BaseException) -> ApiError:
        """Close the row `failed` with the error its client sees (returned), and refund the quota."""
        api_error = as_api_error(error)
        if self.ended:
            return api_error
        opening = None
        if self.opened is None:  # refused before it was opened (bad input, unknown model): still recorded
            self.opened = opening = row_opened(
                request_id=self.request_id, route=self.route, user=self.caller.user, api_key=self.caller.api_key,
                deployment=self.served.deployment if self.served else None, inputs=self.inputs,
                deployment_name=self.served.name if self.served else str(self.inputs.get("model") or ""),
            )  # fmt: skip
        closed = self._closed(Status.FAILED, api_error.status, "error", api_error.body()["error"], self.usage())
        await self._end([opening, closed])
        await self.charge.refund()
        return api_error

    def stopping(self, reason: str, code: str) -> None:
        """Say why the request is about to be cancelled; the cancellation records it."""
        self.stop_reason = (reason, code)

    async def cancel(self) -> None:
        """The client went away or stopped the request (leaving `serve()` cancelled it in every
        stage): close the row `cancelled` with what was produced, and charge that."""
        if self.ended or self.opened is None:
            return
        usage = self.usage()
        reason, code = self.stop_reason
        error = {"message": reason, "type": "cancelled", "param": None, "code": code}
        await self._end([self._closed(Status.CANCELLED, 499, "cancelled", error, usage), self._usage_record(usage)])
        await self.charge.settle(usage)

    async def events(
        self,
        deltas: Deltas,
        *,
        on_delta: Callable[[Delta], Iterable],
        on_complete: Callable[[list[ArtifactStored]], Awaitable[Iterable]],
        on_error: Callable[[ApiError], Iterable],
        complete_options: dict[str, Any] | None = None,
    ) -> AsyncIterator:
        """Relay a submitted request: what `on_delta` renders of each output, then what
        `on_complete` (after the row is complete) or `on_error` (after it failed) renders.

        A consumer that stops iterating and closes this generator (a client disconnect, a
        cancelled task) cancels the request in every stage and closes the row `cancelled`."""
        ended = False
        try:
            async with aclosing(deltas):
                async for delta in deltas:
                    for item in on_delta(delta):
                        yield item
            artifacts = await self.complete(**(complete_options or {}))
            ended = True
            for item in await on_complete(artifacts):
                yield item
        except Exception as failure:  # noqa: BLE001 - a bug must still close the row and the stream
            if not isinstance(failure, ApiError):
                log.exception("request %s failed while streaming", self.request_id)
                failure = ApiError(500, f"The server had an error while streaming: {type(failure).__name__}",
                                   code="internal_error")  # fmt: skip
            error = await self.fail(failure)
            ended = True
            for item in on_error(error):
                yield item
        finally:
            if not ended:
                await asyncio.shield(self.cancel())

    # ------------------------------------------------------------ history

    def _closed(self, status: str, http_status: int, reason: str | None, error: dict | None, usage: Usage):
        outcome = self.outcome
        return row_closed(
            row_id=self.opened.id, started_at=self.opened.started_at, status=status, http_status=http_status,
            finish_reason=reason, error=error, output_text=outcome.text, usage=usage.history(),
            summary_metrics={**outcome.metrics, **self.metrics},
            output_marks=outcome.summary.output_marks if outcome.summary else None,
        )  # fmt: skip

    def _usage_record(self, usage: Usage) -> UsageRecorded | None:
        if self.caller.user is None:
            return None
        modality = "realtime" if self.route == Route.REALTIME else usage.modality
        return UsageRecorded(
            request_id=self.request_id,
            user_id=self.caller.user.pk,
            api_key_id=getattr(self.caller.api_key, "pk", None),
            deployment=self.served.name if self.served else self.opened.deployment_name,
            modality=modality,
            amounts=usage_entry(modality, **usage.record()),
            created_at=time.time(),
        )

    def _has_files(self, outcome: Outcome, keep_audio: bool, keep_media: bool) -> bool:
        audio_in = self.audio_in is not None and self.audio_in[0].size
        return bool((keep_audio and outcome.audio is not None) or audio_in or (keep_media and outcome.media))

    def _store_artifacts(self, outcome: Outcome, audio_format: str, keep_audio: bool, keep_media: bool):
        """The files are written here (storage, no database); the history writer records them."""
        audio_in = self.audio_in
        stored = []
        row_id, request_id = self.opened.id, self.request_id
        audio = outcome.audio
        if keep_audio and audio is not None:
            fmt = "wav" if audio_format == "pcm16" else audio_format
            meta = {"sample_rate": outcome.sample_rate, "duration_s": round(outcome.audio_seconds, 4), "format": fmt,
                    "direction": "out"}  # fmt: skip
            stored.append(artifact_store(row_id, request_id, kind="audio", index=0, mime_type=audio_encoding.MIME_TYPES[fmt],
                                         extension=audio_encoding.EXTENSIONS[fmt], meta=meta,
                                         data=audio_encoding.encode_audio(audio, outcome.sample_rate, fmt)))  # fmt: skip
        if audio_in is not None and audio_in[0].size:
            samples, rate = audio_in
            meta = {"sample_rate": rate, "duration_s": round(samples.size / rate, 4), "format": "wav",
                    "direction": "in"}  # fmt: skip
            stored.append(artifact_store(row_id, request_id, kind="audio", index=1, mime_type="audio/wav",
                                         extension="wav", meta=meta,
                                         data=audio_encoding.encode_audio(samples, rate, "wav")))  # fmt: skip
        if keep_media:
            counters = {"image": 0, "video": 0}
            for media in outcome.media:
                index = counters[media.kind]
                counters[media.kind] += 1
                meta = {key: media.params[key] for key in MEDIA_META if key in media.params}
                meta["format"] = media.format
                stored.append(artifact_store(row_id, request_id, kind=media.kind, index=index, data=media.data,
                                             mime_type=media.mime_type, extension=media.format, meta=meta))  # fmt: skip
        return stored

    async def _append(self, events: list[HistoryEvent | None], lease: str = "") -> None:
        user_id = getattr(self.caller.user, "pk", None) if self.caller.user is not None else None
        events = [event for event in events if event is not None]
        await history_append(loop_redis(), self.request_id, user_id, events, lease=lease)

    def _lease_while_running(self) -> str:
        """While the row is `running`, this process says it serves it (serving_leases.py): the
        lease is written with the row's history and renewed by the loop's renewal task."""
        if self.opened is None or self.opened.status != Status.RUNNING:
            return ""
        leases_for(loop_redis()).track(self.request_id)
        return "hold"

    async def _end(self, events: list[HistoryEvent | None]) -> None:
        self.ended = True
        leases_for(loop_redis()).untrack(self.request_id)
        try:
            await self._append(events, lease="release")
        except Exception:  # the lease then ages out and the orphan sweep closes the row
            log.exception("could not record the end of request %s", self.request_id)
