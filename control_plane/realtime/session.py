"""A realtime session: the protocol's client events applied to one conversation.

Transport-free: `handle(text)` takes a client frame, `send(event)` (given) emits server
events. The consumer owns the socket, authentication and the quota ticker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable

import numpy as np
from django.conf import settings

from control_plane.inference.history_events import ParametersAdded
from control_plane.inference.history_log import history_append
from control_plane.realtime.conversation import (
    Conversation,
    Item,
    Part,
    decode_audio_field,
    item_from_client,
    prompt_messages,
)
from control_plane.realtime.events import ProtocolError, canonical_client_type, error_event, new_id, server_event
from control_plane.realtime.input_buffer import MIN_COMMIT_MS, InputBuffer
from control_plane.realtime.responses import ResponseRun, ResponseSpec
from control_plane.realtime.sampling import entry_sampling
from control_plane.realtime.session_config import MODEL_INPUT_RATE, SessionConfig, _max_tokens, _modalities, _number
from control_plane.realtime.states import IllegalTransition, StateMachine
from control_plane.realtime.truncation import ContextTooLong, kept_items, prompt_budget
from control_plane.realtime.vad import FRAME_MS, START_FRAMES, EnergyVad
from control_plane.system.json_bounds import HostileJson, check_json_values
from stages.config import load_deploy_config
from stages.context_truncation import PromptCounter
from stages.resampling import resample

log = logging.getLogger(__name__)

MAX_APPEND_BYTES = 15 * 1024 * 1024  # of base64 text per input_audio_buffer.append, as OpenAI's limit
MAX_BUFFER_S = 600


def max_append_bytes() -> int:
    return int(getattr(settings, "REALTIME_MAX_APPEND_BYTES", MAX_APPEND_BYTES))


class RealtimeSession:
    def __init__(self, *, principal, deployment, pipeline, redis, quota, send: Callable[[dict], Awaitable[None]],
                 max_session_s: float):  # fmt: skip
        self.principal = principal
        self.deployment = deployment
        self.pipeline = pipeline
        self.deploy = load_deploy_config(deployment.deploy_config or {}, pipeline)
        self.redis = redis
        self.quota = quota
        self.send = send
        self.config = SessionConfig(
            id=new_id("sess"), model=deployment.name, expires_at=int(time.time() + max_session_s)
        )
        self.conversation = Conversation()
        self.session_state = StateMachine("session")
        self.turn = StateMachine("turn")
        self.response_state = StateMachine("response")
        self.buffer = InputBuffer(self.config.input_format.rate)
        self.vad = self._new_vad()
        self.pending_item_id: str | None = None  # the user item a detected turn will become
        self.speech_start_ms = 0
        self.response: ResponseRun | None = None
        self.responses_done = 0
        self.counter = PromptCounter.for_model(deployment.model_dir, pipeline.family)

    new_id = staticmethod(new_id)

    # ------------------------------------------------------------------ lifecycle

    async def open(self, initial: dict | None = None) -> None:
        if initial:
            self.config.update(initial)
            self._input_format_changed()
        self.session_state.fire("open")
        await self.send(server_event("session.created", session=self.config.ga()))
        await self.send(server_event("conversation.created", conversation={"id": self.conversation.id,
                                                                           "object": "realtime.conversation"}))  # fmt: skip

    async def close(self) -> None:
        if self.session_state.allows("close"):
            self.session_state.fire("close")
        if self.response is not None:
            self.response.cancel("session_closed")
            task = self.response.task
            if task is not None:
                await asyncio.gather(task, return_exceptions=True)

    # ------------------------------------------------------------------ dispatch

    async def handle(self, text: str) -> None:
        event_id = None
        try:
            try:
                event = json.loads(text)
                check_json_values(event)
            except (json.JSONDecodeError, TypeError, RecursionError):
                raise ProtocolError("The event is not valid JSON.", code="invalid_json") from None
            except HostileJson as error:
                raise ProtocolError(error.message, code="invalid_value", param=error.param) from None
            if not isinstance(event, dict):
                raise ProtocolError("An event must be a JSON object.", code="invalid_event")
            event_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
            event_type = event.get("type")
            canonical = canonical_client_type(event_type) if isinstance(event_type, str) else None
            if canonical is None:
                raise ProtocolError(f"Invalid event type {event_type!r}.", code="invalid_event_type", param="type")
            if self.session_state.state != "active":
                raise IllegalTransition("session", self.session_state.state, canonical)
            await getattr(self, "on_" + canonical.replace(".", "_"))(event)
        except ProtocolError as error:
            await self.send(error_event(error.message, code=error.code, param=error.param, event_id=event_id))
        except IllegalTransition as illegal:
            await self.send(error_event(illegal.message, code=illegal.code, event_id=event_id))

    # ------------------------------------------------------------------ session

    async def on_session_update(self, event: dict) -> None:
        before = (self.config.input_format, json.dumps(self.config.turn_detection, sort_keys=True))
        self.config.update(event.get("session"))
        after = (self.config.input_format, json.dumps(self.config.turn_detection, sort_keys=True))
        if before != after:
            self._input_format_changed()
        await self.send(server_event("session.updated", session=self.config.ga()))

    def _input_format_changed(self) -> None:
        if self.buffer.rate != self.config.input_format.rate:
            self.buffer.rebase(self.config.input_format.rate)
        self.vad = self._new_vad()
        self.turn = StateMachine("turn")

    def _new_vad(self) -> EnergyVad | None:
        detection = self.config.turn_detection
        if not self.config.server_vad:
            return None
        vad = EnergyVad(self.buffer.rate, detection["threshold"], detection["silence_duration_ms"])
        vad.position_ms = self.buffer.end_ms
        vad.last_voice_end_ms = self.buffer.end_ms
        return vad

    # ------------------------------------------------------------------ input audio

    async def on_input_audio_buffer_append(self, event: dict) -> None:
        audio = event.get("audio")
        if isinstance(audio, str) and len(audio) > max_append_bytes():
            raise ProtocolError(
                f"Invalid 'audio': {len(audio)} bytes of base64 is more than one event may carry "
                f"({max_append_bytes()}); send smaller chunks.",
                param="audio",
                code="audio_too_large",
            )
        samples = decode_audio_field(audio, self.config.input_format, "audio")
        if self.buffer.duration_ms + samples.size * 1000 // self.buffer.rate > MAX_BUFFER_S * 1000:
            raise ProtocolError(f"The input audio buffer holds at most {MAX_BUFFER_S} s; commit or clear it.",
                                param="audio", code="input_audio_buffer_full")  # fmt: skip
        self.turn.fire("append")
        self.quota.audio_seconds_in += samples.size / self.buffer.rate
        self.buffer.append(samples)
        if self.vad is None:
            return
        for vad_event in self.vad.feed(samples):
            if vad_event.kind == "start":
                await self._speech_started(vad_event.ms)
            else:
                await self._speech_stopped(vad_event.ms)
        if not self.vad.speaking:
            padding = self.config.turn_detection["prefix_padding_ms"]
            self.buffer.keep_last(padding + (START_FRAMES + 1) * FRAME_MS)

    async def _speech_started(self, start_ms: int) -> None:
        self.turn.fire("speech_start")
        self.speech_start_ms = max(self.buffer.start_sample * 1000 // self.buffer.rate,
                                   start_ms - self.config.turn_detection["prefix_padding_ms"])  # fmt: skip
        self.pending_item_id = new_id("item")
        await self.send(server_event("input_audio_buffer.speech_started", audio_start_ms=start_ms,
                                     item_id=self.pending_item_id))  # fmt: skip
        if self.response is not None and self.config.turn_detection["interrupt_response"]:
            if self.response_state.allows("cancel"):
                self.response_state.fire("cancel")
                self.response.cancel("turn_detected")

    async def _speech_stopped(self, end_ms: int) -> None:
        self.turn.fire("speech_stop")
        item_id = self.pending_item_id or new_id("item")
        await self.send(server_event("input_audio_buffer.speech_stopped", audio_end_ms=end_ms, item_id=item_id))
        samples = self.buffer.take(self.speech_start_ms, end_ms)
        turn_started = time.monotonic()
        item = await self._commit(samples, item_id)
        self.pending_item_id = None
        if self.config.turn_detection["create_response"]:
            if self.response is not None and self.response_state.state == "cancelling" and self.response.task:
                await asyncio.gather(self.response.task, return_exceptions=True)  # a barge-in: let it end first
            if self.response_state.allows("create"):
                await self._start_response({}, turn_started, item)
            else:
                log.info("session %s: a turn ended while a response is still running", self.config.id)

    async def on_input_audio_buffer_commit(self, event: dict) -> None:
        if self.buffer.duration_ms < MIN_COMMIT_MS:
            raise ProtocolError(
                f"Error committing input audio buffer: buffer too small. Expected at least {MIN_COMMIT_MS}ms of "
                f"audio, but buffer only has {self.buffer.duration_ms}ms of audio.",
                code="input_audio_buffer_commit_empty",
            )
        self.turn.fire("commit")
        item_id = self.pending_item_id or new_id("item")
        self.pending_item_id = None
        if self.vad is not None:
            self.vad.reset()
        await self._commit(self.buffer.take(), item_id)

    async def _commit(self, samples: np.ndarray, item_id: str) -> Item:
        model_samples = resample(samples, self.buffer.rate, MODEL_INPUT_RATE)
        item = Item(id=item_id, role="user", parts=[Part(type="input_audio", samples=model_samples)])
        previous = self.conversation.add(item)
        await self.send(server_event("input_audio_buffer.committed", previous_item_id=previous, item_id=item.id))
        await self.send(server_event("conversation.item.added", previous_item_id=previous, item=item.ga()))
        await self.send(server_event("conversation.item.done", item=item.ga()))
        return item

    async def on_input_audio_buffer_clear(self, event: dict) -> None:
        self.turn.fire("clear")
        self.buffer.clear()
        self.pending_item_id = None
        if self.vad is not None:
            self.vad.reset()
        await self.send(server_event("input_audio_buffer.cleared"))

    async def on_output_audio_buffer_clear(self, event: dict) -> None:
        raise ProtocolError("output_audio_buffer.clear is for WebRTC and SIP sessions; over a WebSocket the client "
                            "owns playback (send response.cancel and conversation.item.truncate).",
                            code="unsupported_event")  # fmt: skip

    # ------------------------------------------------------------------ conversation

    async def on_conversation_item_create(self, event: dict) -> None:
        item = item_from_client(event.get("item"), self.config.input_format)
        previous = self.conversation.add(item, event.get("previous_item_id"))
        await self.send(server_event("conversation.item.added", previous_item_id=previous, item=item.ga()))
        await self.send(server_event("conversation.item.done", item=item.ga()))

    async def on_conversation_item_retrieve(self, event: dict) -> None:
        item = self.conversation.get(event.get("item_id"))
        body = item.ga(include_audio=True, encode=self._encode_for_client)
        await self.send(server_event("conversation.item.retrieved", item=body))

    def _encode_for_client(self, samples: np.ndarray, rate: int) -> bytes:
        return self.config.input_format.encode(resample(samples, rate, self.config.input_format.rate))

    async def on_conversation_item_delete(self, event: dict) -> None:
        item_id = event.get("item_id")
        self.conversation.delete(item_id)
        await self.send(server_event("conversation.item.deleted", item_id=item_id))

    async def on_conversation_item_truncate(self, event: dict) -> None:
        item = self.conversation.get(event.get("item_id"))
        index = event.get("content_index", 0)
        end_ms = event.get("audio_end_ms")
        if item.role != "assistant":
            raise ProtocolError("Only assistant messages can be truncated.", param="item_id")
        if not isinstance(index, int) or not 0 <= index < len(item.parts) or item.parts[index].type != "output_audio":
            raise ProtocolError("Invalid 'content_index': no audio content there.", param="content_index")
        part = item.parts[index]
        duration_ms = math.ceil(part.seconds * 1000)
        if isinstance(end_ms, bool) or not isinstance(end_ms, int) or not 0 <= end_ms <= duration_ms:
            raise ProtocolError(f"Invalid 'audio_end_ms': expected an integer in [0, {duration_ms}] (the item's audio "
                                "length in ms).", param="audio_end_ms")  # fmt: skip
        heard = _heard_text(part.transcript or "", end_ms, duration_ms)
        if part.samples is not None:
            part.samples = part.samples[: end_ms * part.rate // 1000]
        part.transcript = heard
        part.audio_ms = end_ms
        if item.response_id:  # what the user heard of the response, in its history row
            heard_parameters = {"heard_audio_ms": end_ms, "heard_transcript": heard}
            await history_append(self.redis, item.response_id, getattr(self.principal.user, "pk", None),
                                 [ParametersAdded(request_id=item.response_id, parameters=heard_parameters)])  # fmt: skip
        await self.send(server_event("conversation.item.truncated", item_id=item.id, content_index=index,
                                     audio_end_ms=end_ms))  # fmt: skip

    # ------------------------------------------------------------------ responses

    async def on_response_create(self, event: dict) -> None:
        if not self.response_state.allows("create"):
            raise IllegalTransition("response", self.response_state.state, "create")
        await self._start_response(event.get("response") or {}, time.monotonic(), None)

    async def _start_response(self, overrides: dict, turn_started: float, user_item: Item | None) -> None:
        spec = self._spec(overrides, turn_started)
        if not await self.may_respond():
            return
        if user_item is None:
            user_item = next((item for item in reversed(self.conversation.items) if item.role == "user"), None)
        if user_item is not None:
            audio = [
                part.samples for part in user_item.parts if part.type == "input_audio" and part.samples is not None
            ]
            spec.audio_in = np.concatenate(audio) if audio else None
        self.response_state.fire("create")
        self.response = ResponseRun(session=self, spec=spec, send=self.send)
        self.response.start()

    def _spec(self, overrides: dict, turn_started: float) -> ResponseSpec:
        if not isinstance(overrides, dict):
            raise ProtocolError("'response' must be an object.", param="response")
        config = self.config
        modalities = config.output_modalities
        for name in ("output_modalities", "modalities"):
            if name in overrides:
                modalities = _modalities(overrides[name], f"response.{name}")
        max_tokens = config.max_output_tokens
        for name in ("max_output_tokens", "max_response_output_tokens"):
            if name in overrides:
                max_tokens = _max_tokens(overrides[name], f"response.{name}")
        temperature = config.temperature
        if "temperature" in overrides:
            temperature = _number(overrides["temperature"], "response.temperature", 0.0, 2.0)
        instructions = overrides.get("instructions", config.instructions)
        if not isinstance(instructions, str):
            raise ProtocolError("Invalid 'response.instructions': expected a string.", param="response.instructions")
        voice = overrides.get("voice") or (overrides.get("audio") or {}).get("output", {}).get("voice") or config.voice
        if overrides.get("tools"):
            raise ProtocolError("Tools are not supported by this server.", param="response.tools")
        conversation = overrides.get("conversation", "auto")
        if conversation not in ("auto", "none"):
            raise ProtocolError("Invalid 'response.conversation': expected 'auto' or 'none'.",
                                param="response.conversation")  # fmt: skip
        extra = []
        if "input" in overrides:
            if not isinstance(overrides["input"], list):
                raise ProtocolError("'response.input' must be a list of items.", param="response.input")
            extra = [item_from_client(body, config.input_format, f"response.input[{i}]")
                     for i, body in enumerate(overrides["input"])]  # fmt: skip
        history = [] if conversation == "none" and "input" in overrides else self.conversation.items
        context_error = None
        try:
            items = self._prompt_items([*history, *extra], instructions, max_tokens, temperature)
        except ContextTooLong as too_long:
            items, context_error = [*history, *extra], str(too_long)
        messages = prompt_messages(items, instructions, self.pipeline.family)
        if not any(message["role"] == "user" for message in messages):
            raise ProtocolError("There is nothing to respond to: the conversation has no user message.",
                                code="conversation_empty")  # fmt: skip
        return ResponseSpec(
            modalities=modalities,
            instructions=instructions,
            max_output_tokens=max_tokens,
            temperature=temperature,
            voice=voice,
            output_format=config.output_format,
            messages=messages,
            in_conversation=conversation == "auto",
            metadata=overrides.get("metadata"),
            turn_started=turn_started,
            context_error=context_error,
        )

    def _prompt_items(self, items: list[Item], instructions: str, max_tokens, temperature) -> list[Item]:
        sampling = entry_sampling(self.pipeline, self.deploy, max_tokens, temperature)
        budget = prompt_budget(self.pipeline, self.deploy, sampling.max_tokens if sampling else 0)
        return kept_items(items, instructions=instructions, counter=self.counter, family=self.pipeline.family,
                          budget=budget, truncation=self.config.truncation)  # fmt: skip

    async def on_response_cancel(self, event: dict) -> None:
        response_id = event.get("response_id")
        if self.response is not None and response_id and response_id != self.response.id:
            raise ProtocolError(f"No active response with id '{response_id}'.", param="response_id",
                                code="response_cancel_not_active")  # fmt: skip
        self.response_state.fire("cancel")
        self.response.cancel("client_cancelled")

    async def response_finished(self, run: ResponseRun) -> None:
        """Called by the run itself once its response.done is out."""
        if self.response is run:
            self.response = None
            self.response_state.fire("finish")
            self.responses_done += 1
            await self.after_response()

    async def after_response(self) -> None:
        """Hook for the consumer (rate_limits.updated)."""

    async def may_respond(self) -> bool:
        """Hook for the consumer: whether the session's credential still holds (key_watch.py)."""
        return True


def _heard_text(transcript: str, heard_ms: int, total_ms: int) -> str:
    """The transcript's share of the audio that was heard, cut back to a word boundary."""
    if total_ms <= 0 or heard_ms >= total_ms:
        return transcript
    cut = len(transcript) * heard_ms // total_ms
    head = transcript[:cut]
    if cut < len(transcript) and not transcript[cut].isspace() and " " in head:
        head = head[: head.rfind(" ")]
    return head.rstrip()
