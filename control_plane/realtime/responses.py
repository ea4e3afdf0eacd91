"""One response: the pipeline's outputs turned into the protocol's response events.

    run = ResponseRun(...); task = asyncio.create_task(run.run())
    run.cancel("turn_detected")      # barge-in or response.cancel

Text deltas of the thinker become `response.output_audio_transcript.delta` (audio
responses) or `response.output_text.delta` (text responses); audio chunks of the last
stage, resampled from the model's rate to the client's format, `response.output_audio.delta`.
Cancelling leaves the serving loop, which cancels the request in every stage.
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
from channels.db import database_sync_to_async

from control_plane.openai_compat.payloads import audio_samples, resolve
from control_plane.orchestrator.serving import ServingUnavailable, serve
from control_plane.realtime import recording
from control_plane.realtime.conversation import Item, Part
from control_plane.realtime.events import server_event
from control_plane.realtime.sampling import entry_sampling, later_sampling
from stages.protocol import StageRequest
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
        self.summary = None
        self.error = None
        self.row = None
        self.row_opening: asyncio.Future | None = None
        self.prompt_tokens: int | None = None

    @property
    def part(self) -> Part:
        return self.item.parts[0]

    def start(self) -> asyncio.Task:
        self.task = asyncio.create_task(self.run(), name=f"realtime-{self.id}")
        return self.task

    def cancel(self, reason: str) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = reason
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

    async def _text(self, text: str) -> None:
        self.text_parts.append(text)
        kind = "response.output_audio_transcript.delta" if self.audio else "response.output_text.delta"
        if self.audio:
            self.part.transcript = "".join(self.text_parts)
        else:
            self.part.text = "".join(self.text_parts)
        await self.send(server_event(kind, **self._ids(), delta=text))

    async def _audio(self, samples: np.ndarray, rate: int) -> None:
        if not self.audio or samples.size == 0:
            return
        if self.resampler is None or self.model_rate != rate:
            self.model_rate = rate
            self.session.config.model_output_rate = rate
            self.resampler = StreamResampler(rate, self.spec.output_format.rate)
        converted = self.resampler.process(samples)
        if converted.size == 0:
            return
        self.audio_chunks.append(converted)
        if self.first_audio_s is None:
            self.first_audio_s = time.monotonic() - self.spec.turn_started
        delta = base64.b64encode(self.spec.output_format.encode(converted)).decode()
        await self.send(server_event("response.output_audio.delta", **self._ids(), delta=delta))

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
        usage = self.summary.usage if self.summary else {}
        prompt = int(usage.get("prompt_tokens", self.prompt_tokens or 0))
        text_out = int(usage.get("completion_tokens", len(self.text_parts)))
        entry = self.session.pipeline.entry_stage.name
        audio_out = sum(
            int(value)
            for key, value in usage.items()
            if key.startswith("stage.") and key.endswith(".output_tokens") and key != f"stage.{entry}.output_tokens"
        )
        return {
            "total_tokens": prompt + text_out + audio_out,
            "input_tokens": prompt,
            "output_tokens": text_out + audio_out,
            "input_token_details": {"text_tokens": prompt, "audio_tokens": 0, "image_tokens": 0, "cached_tokens": 0},
            "output_token_details": {"text_tokens": text_out, "audio_tokens": audio_out},
        }

    @property
    def audio_out_seconds(self) -> float:
        return sum(chunk.size for chunk in self.audio_chunks) / self.spec.output_format.rate

    def metrics(self) -> dict:
        metrics = dict(self.summary.metrics) if self.summary else {}
        if self.first_audio_s is not None:
            metrics["model_ttfp_s"] = metrics.get("ttfp_s", self.first_audio_s)
            metrics["ttfp_s"] = round(self.first_audio_s, 4)
        return metrics

    def history_usage(self, usage: dict) -> dict:
        history = {"text": {"prompt_tokens": usage["input_tokens"], "completion_tokens": usage["output_tokens"]}}
        if self.audio_chunks:
            history["audio"] = {"seconds": round(self.audio_out_seconds, 4), "sample_rate": self.part.rate}
        if self.spec.audio_in is not None:
            history["audio_in"] = {"seconds": round(self.spec.audio_in.size / self.spec.audio_in_rate, 4)}
        return history

    # ------------------------------------------------------------------ running

    def stage_request(self) -> StageRequest:
        session = self.session
        sampling = entry_sampling(session.pipeline, session.deploy, self.spec.max_output_tokens, self.spec.temperature)
        params = {"voice": self.spec.voice} if self.spec.voice else {}
        return StageRequest(
            request_id=self.id, messages=self.spec.messages, sampling=sampling, params=params, arrival_time=time.time()
        )

    async def run(self) -> None:
        status, details = "completed", None
        try:
            await self._open()
            self.row_opening = asyncio.ensure_future(self._open_row())  # off the path to the first audio
            status, details = await self._serve()
        except asyncio.CancelledError:
            status, details = "cancelled", {"type": "cancelled", "reason": self.cancel_reason or "client_cancelled"}
        except Exception as crash:  # noqa: BLE001 - a bug ends this response, never the session
            log.exception("realtime response %s crashed", self.id)
            status = "failed"
            details = {"type": "failed", "error": {"type": "server_error", "code": "internal_error",
                                                   "message": f"{type(crash).__name__}: {crash}"}}  # fmt: skip
        await asyncio.shield(self._finish(status, details))

    async def _open_row(self):
        return await database_sync_to_async(recording.response_open)(
            principal=self.session.principal,
            deployment=self.session.deployment,
            response_id=self.id,
            session_id=self.session.config.id,
            inputs={"messages": _summarised(self.spec.messages)},
            parameters={"output_modalities": self.spec.modalities, "voice": self.spec.voice,
                        "max_output_tokens": self.spec.max_output_tokens},
        )  # fmt: skip

    async def _serve(self) -> tuple[str, dict | None]:
        session = self.session
        client = session.redis
        later = later_sampling(session.pipeline, session.deploy, self.spec.max_output_tokens)
        try:
            async with aclosing(serve(str(session.deployment.id), self.stage_request(), later,
                                      idle_timeout_s=IDLE_TIMEOUT_S, client=client)) as messages:  # fmt: skip
                async for message in messages:
                    if message.kind == "output":
                        output = message.output
                        if "num_prompt_tokens" in output.metrics and self.prompt_tokens is None:
                            self.prompt_tokens = int(output.metrics["num_prompt_tokens"])
                        if output.text:
                            await self._text(output.text)
                        if "audio" in output.payloads:
                            samples = audio_samples(await resolve(output.payloads["audio"], client))
                            await self._audio(samples, int(output.params.get("sample_rate") or 24000))
                    elif message.kind == "complete":
                        self.summary = message.summary
                        return "completed", None
                    elif message.kind == "fail":
                        self.summary = message.summary
                        self.error = message.error
                        error = message.error
                        kind = (
                            "invalid_request_error"
                            if error and error.type == "invalid_request_error"
                            else "server_error"
                        )
                        return "failed", {"type": "failed", "error": {"type": kind, "code": error.code if error else None,
                                                                      "message": error.message if error else "failed"}}  # fmt: skip
        except ServingUnavailable as unavailable:
            return "failed", {"type": "failed", "error": {"type": "server_error", "code": "service_unavailable",
                                                          "message": str(unavailable)}}  # fmt: skip
        return "failed", {"type": "failed", "error": {"type": "server_error", "message": "the request ended early"}}

    async def _finish(self, status: str, details: dict | None) -> None:
        try:
            await self._close(status, details)
        except Exception:  # the socket may be gone; the history below still gets written
            log.info("could not send the end of response %s", self.id)
        usage = self.usage()
        self.session.quota.text_tokens += usage["total_tokens"]
        self.session.quota.audio_seconds_out += self.audio_out_seconds
        if self.row_opening is not None:
            try:
                self.row = await self.row_opening  # a row once opened is always closed
            except Exception:
                log.exception("could not open the history row of %s", self.id)
        if self.row is not None:
            error = details.get("error") if details and status == "failed" else None
            audio_in = (self.spec.audio_in, self.spec.audio_in_rate) if self.spec.audio_in is not None else None
            audio_out = (np.concatenate(self.audio_chunks), self.part.rate) if self.audio_chunks else None
            try:
                await database_sync_to_async(recording.response_close)(
                    self.row, principal=self.session.principal, status=status, output_text="".join(self.text_parts),
                    usage=self.history_usage(usage), metrics=self.metrics(), audio_in=audio_in, audio_out=audio_out,
                    error=error,
                )  # fmt: skip
            except Exception:
                log.exception("could not record realtime response %s", self.id)
        await self.session.response_finished(self)


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
