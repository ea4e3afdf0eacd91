"""One response: a request run (control_plane/inference/request_run.py) rendered as the
protocol's response events.

    response = ResponseRun(...); response.start()
    response.cancel("turn_detected")      # barge-in or response.cancel

Text deltas of the thinker become `response.output_audio_transcript.delta` (audio
responses) or `response.output_text.delta` (text responses); audio chunks of the last
stage, resampled from the model's rate to the client's format, `response.output_audio.delta`.
Cancelling leaves the serving loop, which cancels the request in every stage. The run
records the response (route `realtime`, with the user's audio of the turn and the audio
sent back as artifacts) and charges it to the session's quota.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field

import numpy as np

from control_plane.inference.errors import ApiError
from control_plane.inference.models import Route
from control_plane.inference.outcome import Delta
from control_plane.inference.request_run import RequestRun
from control_plane.inference.request_voice import request_voice
from control_plane.inference.targets import Caller, Served
from control_plane.realtime.conversation import Item, Part
from control_plane.realtime.events import server_event
from control_plane.realtime.sampling import entry_sampling, later_sampling
from control_plane.realtime.session_quota import ResponseCharge
from stages.protocol import RequestOptions, StageRequest
from stages.resampling import StreamResampler

log = logging.getLogger(__name__)
IDLE_TIMEOUT_S = 120.0


@dataclass
class ResponseSpec:
    """What response.create (or a VAD turn) asked for, merged over the session's settings."""

    modalities: list[str]
    instructions: str
    max_output_tokens: int | str
    temperature: float | None
    voice: str | None
    output_format: object
    messages: list[dict]
    in_conversation: bool = True
    metadata: dict | None = None
    turn_started: float = field(default_factory=time.monotonic)
    audio_in: np.ndarray | None = None  # the user's audio of this turn, at the model's input rate
    audio_in_rate: int = 16000
    context_error: str | None = None  # the prompt cannot fit the model's context (truncation)


class ResponseRun:
    def __init__(self, *, session, spec: ResponseSpec, send: Callable[[dict], Awaitable[None]]):
        self.session = session
        self.spec = spec
        self.send = send
        self.id = session.new_id("resp")
        self.audio = "audio" in spec.modalities
        part = Part(type="output_audio", transcript="") if self.audio else Part(type="output_text")
        self.item = Item(id=session.new_id("item"), role="assistant", parts=[part], status="in_progress")
        self.item.response_id = self.id
        self.cancel_reason: str | None = None
        self.task: asyncio.Task | None = None
        self.text_parts: list[str] = []
        self.audio_chunks: list[np.ndarray] = []
        self.resampler: StreamResampler | None = None
        self.model_rate: int | None = None
        self.first_audio_s: float | None = None
        self.failure: ApiError | None = None
        self.voice: tuple[str | None, dict] = (None, {})  # the voice and its params, checked when the response starts
        principal = session.principal
        self.request = RequestRun(route=Route.REALTIME, request_id=self.id, caller=Caller(principal.user,
                                  principal.api_key), charge=ResponseCharge(session.quota))  # fmt: skip
        if spec.audio_in is not None:
            self.request.audio_in = (spec.audio_in, spec.audio_in_rate)

    @property
    def part(self) -> Part:
        return self.item.parts[0]

    def start(self) -> asyncio.Task:
        self.task = asyncio.create_task(self.run(), name=f"realtime-{self.id}")
        return self.task

    def cancel(self, reason: str) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = reason
            self.request.stopping(f"the response was cancelled ({reason})", reason)
            if self.task is not None and not self.task.done():
                self.task.cancel()

    # ------------------------------------------------------------------ events

    def _ids(self, content: bool = True) -> dict:
        ids = {"response_id": self.id, "item_id": self.item.id, "output_index": 0}
        return {**ids, "content_index": 0} if content else ids

    def response_body(self, status: str, status_details: dict | None = None, usage: dict | None = None) -> dict:
        body = {
            "id": self.id,
            "object": "realtime.response",
            "status": status,
            "status_details": status_details,
            "output": [self.item.ga()] if status != "in_progress" else [],
            "conversation_id": self.session.conversation.id if self.spec.in_conversation else None,
            "output_modalities": list(self.spec.modalities),
            "max_output_tokens": self.spec.max_output_tokens,
            "audio": {"output": {"format": self.spec.output_format.ga(), "voice": self.spec.voice}},
            "usage": usage,
            "metadata": self.spec.metadata,
        }
        return body

    async def _open(self) -> None:
        await self.send(server_event("response.created", response=self.response_body("in_progress")))
        previous = None
        if self.spec.in_conversation:
            previous = self.session.conversation.add(self.item)
        await self.send(server_event("response.output_item.added", response_id=self.id, output_index=0,
                                     item=self.item.ga()))  # fmt: skip
        if self.spec.in_conversation:
            await self.send(server_event("conversation.item.added", previous_item_id=previous, item=self.item.ga()))
        await self.send(server_event("response.content_part.added", **self._ids(), part=self.part.ga()))

    def _delta_events(self, delta: Delta) -> list[dict]:
        events = []
        if delta.text:
            events.append(self._text(delta.text))
        if delta.audio is not None:
            events += self._audio(delta.audio, delta.sample_rate or 24000)
        return events

    def _text(self, text: str) -> dict:
        self.text_parts.append(text)
        kind = "response.output_audio_transcript.delta" if self.audio else "response.output_text.delta"
        if self.audio:
            self.part.transcript = "".join(self.text_parts)
        else:
            self.part.text = "".join(self.text_parts)
        return server_event(kind, **self._ids(), delta=text)

    def _audio(self, samples: np.ndarray, rate: int) -> list[dict]:
        if not self.audio or samples.size == 0:
            return []
        if self.resampler is None or self.model_rate != rate:
            self.model_rate = rate
            self.session.config.model_output_rate = rate
            self.resampler = StreamResampler(rate, self.spec.output_format.rate)
        converted = self.resampler.process(samples)
        if converted.size == 0:
            return []
        self.audio_chunks.append(converted)
        if self.first_audio_s is None:
            self.first_audio_s = time.monotonic() - self.spec.turn_started
            self.request.metrics["ttfp_s"] = round(self.first_audio_s, 4)
        delta = base64.b64encode(self.spec.output_format.encode(converted)).decode()
        return [server_event("response.output_audio.delta", **self._ids(), delta=delta)]

    async def _close(self, status: str, status_details: dict | None) -> None:
        self.item.status = "completed" if status == "completed" else "incomplete"
        text = "".join(self.text_parts)
        if self.audio:
            self.part.samples = np.concatenate(self.audio_chunks) if self.audio_chunks else np.zeros(0, np.float32)
            self.part.rate = self.spec.output_format.rate
            await self.send(server_event("response.output_audio.done", **self._ids()))
            await self.send(server_event("response.output_audio_transcript.done", **self._ids(), transcript=text))
        else:
            await self.send(server_event("response.output_text.done", **self._ids(), text=text))
        await self.send(server_event("response.content_part.done", **self._ids(), part=self.part.ga()))
        await self.send(server_event("response.output_item.done", response_id=self.id, output_index=0,
                                     item=self.item.ga()))  # fmt: skip
        if self.spec.in_conversation:
            await self.send(server_event("conversation.item.done", item=self.item.ga()))
        response = self.response_body(status, status_details, self.usage())
        response["omnistage"] = self.metrics()
        await self.send(server_event("response.done", response=response))

    # ------------------------------------------------------------------ accounting

    def usage(self) -> dict:
        """The protocol's usage object: audio tokens (the talker's codes) count as output tokens."""
        usage = self.request.usage()
        prompt, text_out, audio_out = usage.prompt_tokens, usage.completion_tokens, usage.audio_tokens
        return {
            "total_tokens": prompt + text_out + audio_out,
            "input_tokens": prompt,
            "output_tokens": text_out + audio_out,
            "input_token_details": {"text_tokens": prompt, "audio_tokens": 0, "image_tokens": 0, "cached_tokens": 0},
            "output_token_details": {"text_tokens": text_out, "audio_tokens": audio_out},
        }

    def metrics(self) -> dict:
        metrics = self.request.outcome.metrics
        if self.first_audio_s is not None:
            metrics["model_ttfp_s"] = metrics.get("ttfp_s", self.first_audio_s)
            metrics["ttfp_s"] = round(self.first_audio_s, 4)
        return metrics

    # ------------------------------------------------------------------ running

    def stage_request(self) -> StageRequest:
        session = self.session
        sampling = entry_sampling(session.pipeline, session.deploy, self.spec.max_output_tokens, self.spec.temperature)
        return StageRequest(
            request_id=self.id,
            messages=self.spec.messages,
            sampling=sampling,
            options=RequestOptions(voice=self.voice[0]),
            params=dict(self.voice[1]),
            arrival_time=time.time(),
        )

    async def run(self) -> None:
        status, details = "completed", None
        try:
            await self._open()
            await self._serve()
            if self.failure is not None:
                status, details = "failed", _failure_details(self.failure)
        except asyncio.CancelledError:
            status, details = "cancelled", {"type": "cancelled", "reason": self.cancel_reason or "client_cancelled"}
            await asyncio.shield(self.request.cancel())  # cancelled before its outputs streamed
        except Exception as crash:  # noqa: BLE001 - a bug ends this response, never the session
            log.exception("realtime response %s crashed", self.id)
            status, details = "failed", _failure_details(await self.request.fail(crash))
        await asyncio.shield(self._finish(status, details))

    async def _serve(self) -> None:
        session = self.session
        await self.request.open(
            Served(session.deployment, session.pipeline),
            inputs={"session_id": session.config.id, "messages": _summarised(self.spec.messages)},
            parameters={"output_modalities": self.spec.modalities, "voice": self.spec.voice,
                        "max_output_tokens": self.spec.max_output_tokens},
            modalities=self.spec.modalities,
            stream=True,
        )  # fmt: skip
        if self.spec.context_error is not None:
            self.failure = await self.request.fail(ApiError(400, self.spec.context_error,
                                                            code="context_length_exceeded"))  # fmt: skip
            return
        later = later_sampling(session.pipeline, session.deploy, self.spec.max_output_tokens)
        try:
            self.voice = await request_voice(self.request.served, self.session.principal.user, self.spec.voice)
            deltas = await self.request.submit(self.stage_request(), later, idle_timeout=IDLE_TIMEOUT_S)
        except ApiError as refused:
            self.failure = await self.request.fail(refused)
            return
        events = self.request.events(deltas, on_delta=self._delta_events, on_complete=_nothing,
                                     on_error=self._failed)  # fmt: skip
        async with aclosing(events):
            async for event in events:
                await self.send(event)

    def _failed(self, error: ApiError) -> list:
        self.failure = error
        return []

    async def _finish(self, status: str, details: dict | None) -> None:
        try:
            await self._close(status, details)
        except Exception:  # the socket may be gone
            log.info("could not send the end of response %s", self.id)
        await self.session.response_finished(self)


async def _nothing(artifacts) -> list:
    return []


def _failure_details(error: ApiError) -> dict:
    kind = "invalid_request_error" if error.type == "invalid_request_error" else "server_error"
    return {"type": "failed", "error": {"type": kind, "code": error.code, "message": error.message}}


def _summarised(messages: list[dict]) -> list[dict]:
    """Messages for the history row: audio data replaced by its size."""
    summary = []
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            content = [
                {"type": "input_audio", "bytes": len(part["input_audio"]["data"]) * 3 // 4}
                if part.get("type") == "input_audio"
                else part
                for part in content
            ]
        summary.append({"role": message["role"], "content": content})
    return summary
