"""The playgrounds' WebSocket: one per page, authenticated by the session.

The browser sends `{"type": "run", "ref", "mode", "deployment", "input"}` (see
playground_requests.py) and may send `{"type": "cancel", "ref"}`; several runs may be in
flight at once (an image gallery, a video job queue). Each run is a request run of the
inference app (admitted by the quota, recorded in the history, served, charged) prepared as
/v1 prepares it; its outputs go back as the events listed in relay.py, each carrying the
run's `ref`.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import aclosing

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from console.code_samples import code_samples
from console.playground_requests import PlaygroundInvalid, PlaygroundRequest, playground_request
from console.relay import MODALITIES, ROUTES, Relay, estimate
from control_plane.inference.errors import KNOWN_ERRORS, ApiError
from control_plane.inference.request_run import RequestRun
from control_plane.inference.targets import Caller, Served, served_deployment
from control_plane.openai_compat.services import request_prepare
from stages.sampling_merge import SAMPLING_FIELDS

log = logging.getLogger(__name__)
IDLE_TIMEOUT_S = 120.0


async def _prepare(playground: PlaygroundRequest, served: Served) -> dict:
    """Shape and check the request as the OpenAI routes do (media, modalities, per-stage
    sampling); returns the later stages' sampling."""
    request = playground.request
    wanted = None
    if playground.mode == "chat":
        outputs = served.output_modalities
        wanted = [modality for modality in ("text", "audio") if modality in outputs] or list(dict.fromkeys(outputs))
    if playground.mode == "speech":  # a chat-template model reads messages, others the prompt
        request.prompt, request.messages = (
            (None, request.messages) if served.pipeline.needs_chat_template else (request.prompt, None)
        )
    sampling = {}
    if playground.mode == "chat":  # the other modes' seed is the image's or video's, not a text stage's
        sampling = {key: value for key, value in playground.parameters.items() if key in SAMPLING_FIELDS}
    prepared = await request_prepare(served, request, sampling=sampling, modalities=wanted)
    if prepared.modalities:
        playground.modalities = prepared.modalities
    if prepared.messages_summary is not None:
        playground.inputs["messages"] = prepared.messages_summary  # the history keeps no media bytes
    return prepared.later_sampling


def _field_of(error: ApiError) -> str:
    """The form field a /v1-shaped error is about."""
    if error.status in (403, 404) or error.param == "model":
        return "deployment"
    param = error.param or ""
    return "attachments" if ".content[" in param else param.rpartition(".")[2] or "input"


def _message_of(error: ApiError, playground: PlaygroundRequest) -> str:
    if error.code == "model_not_found":
        return f"no deployment named {playground.deployment!r}"
    return error.message


class PlaygroundConsumer(AsyncJsonWebsocketConsumer):
    # An alias that is never configured: this consumer takes no channel-layer messages (its runs'
    # outputs come through serve()), so it holds no blocking channel-layer read. That read did not
    # end when cancelled (channels_redis 4.3 over redis-py 8): a closed socket's consumer kept
    # running, and a test's event loop could not close.
    channel_layer_alias = "playground-needs-no-channel-layer"

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not user.is_active:
            await self.close(code=4401)
            return
        self.user = user
        self.runs: dict[str, tuple[asyncio.Task, RequestRun | None]] = {}
        await self.accept()

    async def disconnect(self, code):
        for task, _ in getattr(self, "runs", {}).values():
            task.cancel()  # leaving serve() cancels the request in every stage

    async def receive_json(self, content, **kwargs):
        if not isinstance(content, dict):
            return
        ref = str(content.get("ref", ""))[:64]
        if content.get("type") == "run" and ref not in self.runs:
            self.runs[ref] = (asyncio.create_task(self._run(ref, content)), None)
        elif content.get("type") == "cancel" and ref in self.runs:
            task, run = self.runs.pop(ref)
            if run is not None:
                run.stopping("stopped in the console", "cancelled")
            task.cancel()
            await self._send(ref, {"type": "cancelled"})

    async def _send(self, ref: str, event: dict) -> None:
        await self.send_json({**event, "ref": ref})

    def _base_url(self) -> str:
        headers = dict(self.scope.get("headers", []))
        host = headers.get(b"host", b"127.0.0.1:8000").decode()
        return f"http://{host}"

    async def _run(self, ref: str, content: dict) -> None:
        try:
            playground = playground_request(content)
        except PlaygroundInvalid as invalid:
            await self._send(ref, {"type": "error", "message": invalid.message, "field": invalid.field})
            self.runs.pop(ref, None)
            return
        run = RequestRun(route=ROUTES[playground.mode], request_id=playground.request.request_id,
                         caller=Caller(self.user))  # fmt: skip
        # what the row of a refusal shows: what was asked, without the messages' media bytes
        asked = {key: value for key, value in playground.inputs.items() if key != "messages"}
        run.inputs = {**asked, "model": playground.deployment}
        if ref in self.runs:
            self.runs[ref] = (self.runs[ref][0], run)
        try:
            await self._serve(ref, playground, run)
        except asyncio.CancelledError:  # stopped before its outputs streamed (they close the row themselves)
            await asyncio.shield(run.cancel())
            raise
        except KNOWN_ERRORS as refused:  # refused before any output: recorded, and said at its field
            error = await run.fail(refused)
            await self._send(ref, {"type": "error", "message": _message_of(error, playground),
                                   "field": _field_of(error)})  # fmt: skip
        except Exception as error:  # a bug must reach the browser as an error, not leave it waiting
            log.exception("the playground could not run %s", ref)
            await run.fail(error)
            await self._send(
                ref, {"type": "error", "message": "The console failed to run this request.", "field": None}
            )
        finally:
            self.runs.pop(ref, None)

    async def _serve(self, ref: str, playground: PlaygroundRequest, run: RequestRun) -> None:
        served = await served_deployment(Caller(self.user), playground.deployment)
        run.served = served
        later_sampling = await _prepare(playground, served)
        await run.open(served, inputs=playground.inputs, parameters={**playground.parameters, "source": "console"},
                       modalities=playground.modalities or MODALITIES[playground.mode], stream=True,
                       estimate=estimate(playground))  # fmt: skip
        await self._send(ref, {"type": "started", "request_id": run.request_id,
                               "code": code_samples(playground, self._base_url())})  # fmt: skip
        deltas = await run.submit(playground.request, later_sampling, idle_timeout=IDLE_TIMEOUT_S)
        relay = Relay(run)
        events = run.events(deltas, on_delta=relay.delta_events, on_complete=relay.done_events,
                            on_error=relay.error_events)  # fmt: skip
        async with aclosing(events):
            async for event in events:
                await self._send(ref, event)
