"""POST /v1/chat/completions: text, audio and image outputs, streamed (SSE) or not.

OpenAI's standard shapes: `message.content` for text (a list of `image_url` parts when the
pipeline draws), `message.audio` {id, data, transcript, expires_at} in one choice,
`delta.content` and `delta.audio` when streaming, `stream_options.include_usage`. Omni
extras: `sampling_params_list` (one dict per stage), `voice`/`speaker` (or `audio.voice`),
`max_audio_seconds` (the audio cap of this request, stages/audio_cap.py), `language`,
`instructions`, the diffusion knobs (`size`, `height`, `width`, `num_inference_steps`,
`guidance_scale`, `negative_prompt`, `seed`; a diffusion stage's `sampling_params_list` entry
over them) and `additional_information` (family-specific options, by name; its `voice` is the
request's voice): the request's options, `stages.protocol.RequestOptions`, which every stage of
the request sees (`additional_information` as `RequestOptions.extra`).
"""

from __future__ import annotations

import base64
import time
import uuid
from typing import Any

import msgspec

from control_plane.inference import audio_encoding
from control_plane.inference.audio_limits import max_audio_seconds
from control_plane.inference.errors import ApiError
from control_plane.inference.models import Route
from control_plane.inference.outcome import Delta
from control_plane.inference.request_run import RequestRun
from control_plane.inference.request_voice import request_voice
from control_plane.inference.targets import served_deployment
from control_plane.openai_compat.bodies import convert, read_json
from control_plane.openai_compat.chat_inputs import prepare_messages, summarize
from control_plane.openai_compat.knobs import body_knobs, request_knobs
from control_plane.openai_compat.sampling import build_sampling
from control_plane.openai_compat.session import served_view
from control_plane.openai_compat.sse import DONE, event, sse_response
from control_plane.openai_compat.unsupported import refuse_unsupported
from stages.protocol import RequestOptions, StageRequest
from stages.sampling_merge import SAMPLING_FIELDS
from stages.voice_conditioning import PARAM as VOICE_CONDITIONING

AUDIO_EXPIRY_S = 24 * 3600
VOICE_KEYS = ("voice", VOICE_CONDITIONING)
"""Keys of `additional_information` that never reach the stages as sent: the voice is checked once
(control_plane/inference/request_voice.py) and its conditioning comes from the caller's stored voice."""


class AudioOptions(msgspec.Struct, kw_only=True):
    format: str = "wav"
    voice: str | None = None


class StreamOptions(msgspec.Struct, kw_only=True):
    include_usage: bool = False


class ChatRequest(msgspec.Struct, kw_only=True):
    model: str
    messages: list[Any]
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    modalities: list[str] | None = None
    audio: AudioOptions | None = None
    n: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    min_tokens: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool | None = None
    sampling_params_list: list[Any] | None = None
    max_audio_seconds: float | None = None
    additional_information: dict[str, Any] | None = None
    voice: str | None = None
    speaker: str | None = None
    language: str | None = None
    instructions: str | None = None
    user: str | None = None
    size: str | None = None
    height: int | None = None
    width: int | None = None
    num_inference_steps: int | None = None
    guidance_scale: float | None = None
    negative_prompt: str | None = None


def default_modalities(outputs: list[str]) -> list[str]:
    return ["text"] if "text" in outputs else list(dict.fromkeys(outputs))


def check_modalities(requested: list[str] | None, outputs: list[str]) -> list[str]:
    modalities = default_modalities(outputs) if requested is None else requested
    if not modalities:
        raise ApiError.invalid("modalities", "'modalities' must name at least one output modality.")
    unsupported = [m for m in modalities if m not in outputs]
    if unsupported:
        raise ApiError(
            400,
            f"Unsupported output modalities {unsupported} for this model. Supported modalities: {sorted(set(outputs))}.",
            param="modalities",
            code="unsupported_modality",
        )
    return list(dict.fromkeys(modalities))


def check_common(body: ChatRequest) -> None:
    if body.n is not None and body.n != 1:
        if not 1 <= body.n <= 128:
            raise ApiError.invalid("n", f"'n' must be between 1 and 128, got {body.n}.")
        raise ApiError.invalid("n", "Only n=1 is supported for chat completions.", "unsupported_value")
    if body.temperature is not None and not 0 <= body.temperature <= 2:
        raise ApiError.invalid("temperature", f"'temperature' must be between 0 and 2, got {body.temperature}.")
    for name in ("max_tokens", "max_completion_tokens"):
        value = getattr(body, name)
        if value is not None and value < 1:
            raise ApiError.invalid(name, f"'{name}' must be at least 1, got {value}.")


def sampling_fields(body: Any) -> dict[str, Any]:
    """The request's sampling fields, as `SamplingParams` names them (`max_completion_tokens` is
    OpenAI's newer name of `max_tokens`)."""
    fields = {name: getattr(body, name, None) for name in SAMPLING_FIELDS}
    fields["max_tokens"] = getattr(body, "max_completion_tokens", None) or fields["max_tokens"]
    return fields


def _extra_voice(body: ChatRequest) -> str | None:
    voice = (body.additional_information or {}).get("voice")
    return voice if isinstance(voice, str) else None


def extra_options(body: ChatRequest) -> dict[str, Any]:
    """`additional_information` less its voice keys: the request's family-specific options
    (`RequestOptions.extra`), which every stage of the request sees."""
    return {key: value for key, value in (body.additional_information or {}).items() if key not in VOICE_KEYS}


@served_view(Route.CHAT, "POST")
async def chat_completions(request, run: RequestRun):
    raw = read_json(request)
    run.inputs = {"model": raw.get("model")} if isinstance(raw.get("model"), str) else {}
    body = convert(raw, ChatRequest)
    refuse_unsupported(raw)
    check_common(body)
    served = await served_deployment(
        run.caller, body.model, check=lambda found: check_modalities(body.modalities, found.output_modalities)
    )
    run.served = served
    modalities = check_modalities(body.modalities, served.output_modalities)
    stream = bool(body.stream)
    audio_format = audio_encoding.normalize_format((body.audio.format if body.audio else None) or "wav")
    if audio_format is None:
        raise ApiError.invalid(
            "audio.format", f"Unsupported audio format {body.audio.format!r}; use one of {audio_encoding.FORMATS}."
        )
    if stream and "audio" in modalities and audio_format not in ("pcm16", "wav"):
        raise ApiError.invalid("audio.format", "Streaming audio is sent as pcm16 (or wav); choose one of those.")
    messages = await prepare_messages(body.messages)
    entry_sampling, later_sampling, stage_knobs = build_sampling(
        served.pipeline, served.deploy, sampling_fields(body), body.sampling_params_list
    )
    knobs = request_knobs(body_knobs(body), stage_knobs.fields())
    requested = (body.audio.voice if body.audio else None) or body.voice or body.speaker
    voice, params = await request_voice(served, run.caller.user, requested or _extra_voice(body))
    options = RequestOptions(
        modalities=modalities,
        voice=voice,
        language=body.language or None,
        instructions=body.instructions or None,
        max_audio_seconds=None if body.max_audio_seconds is None else max_audio_seconds(body.max_audio_seconds,
                                                                                         served.deploy),
        diffusion=knobs,
        extra=extra_options(body),
    )  # fmt: skip
    parameters = {
        key: value
        for key, value in msgspec.to_builtins(body).items()
        if key not in ("messages", "model") and value is not None
    }
    estimate = {"text_tokens": float(entry_sampling.max_tokens)} if entry_sampling else {}
    await run.open(
        served,
        inputs={"messages": summarize(messages)},
        parameters=parameters,
        modalities=modalities,
        stream=stream,
        estimate=estimate,
    )
    stage_request = StageRequest(
        request_id=run.request_id,
        messages=messages,
        sampling=entry_sampling,
        options=options,
        params=params,
        arrival_time=time.time(),
    )
    deltas = await run.submit(stage_request, later_sampling)
    view = ChatView(run, modalities, audio_format, body)
    if not stream:
        await deltas.drain()
        artifacts = await run.complete(audio_format=audio_format)
        return view.completion(artifacts)
    return sse_response(
        run.events(
            deltas,
            on_delta=view.chunk_events,
            on_complete=view.final_events,
            on_error=view.error_events,
            complete_options={"audio_format": audio_format},
        )
    )


class ChatView:
    """Renders one request's outcome as OpenAI chat objects."""

    def __init__(self, run: RequestRun, modalities: list[str], audio_format: str, body: ChatRequest):
        self.run = run
        self.modalities = modalities
        self.audio_format = audio_format
        self.include_usage = bool(body.stream_options and body.stream_options.include_usage)
        self.created = int(time.time())
        self.audio_id = f"audio_{uuid.uuid4().hex}"
        self.sent_role = False
        self.sent_wav_header = False

    # ------------------------------------------------------------- shared

    def usage(self) -> dict[str, Any]:
        usage = self.run.usage()
        completion = usage.completion_tokens + usage.audio_tokens
        return {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": usage.prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "text_tokens": usage.completion_tokens,
                "audio_tokens": usage.audio_tokens,
                "audio_seconds": round(usage.audio_seconds, 4),
            },
        }

    def finish_reason(self) -> str:
        reason = self.run.outcome.ending_reason
        return reason if reason in ("stop", "length") else "stop"

    def image_parts(self, media) -> list[dict[str, Any]]:
        return [
            {
                "type": "image_url",
                "image_url": {"url": f"data:{m.mime_type};base64,{base64.b64encode(m.data).decode()}"},
            }
            for m in media
            if m.kind == "image"
        ]

    # ------------------------------------------------------------- whole

    def completion(self, artifacts) -> Any:
        from django.http import JsonResponse

        outcome = self.run.outcome
        text = outcome.text
        message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
        images = self.image_parts(outcome.media) if "image" in self.modalities else []
        if images:
            message["content"] = (
                [{"type": "text", "text": text}] if text and "text" in self.modalities else []
            ) + images
        elif "text" in self.modalities:
            message["content"] = text
        audio = outcome.audio
        if "audio" in self.modalities and audio is not None:
            data = audio_encoding.encode_audio(audio, outcome.sample_rate, self.audio_format)
            audio_artifact = next((a for a in artifacts if a.kind == "audio"), None)
            message["audio"] = {
                "id": f"audio_{uuid.UUID(audio_artifact.id).hex}" if audio_artifact else self.audio_id,
                "data": base64.b64encode(data).decode(),
                "expires_at": int(time.time()) + AUDIO_EXPIRY_S,
                "transcript": text,
            }
        body = {
            "id": self.run.request_id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.run.served.name,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason(), "logprobs": None}],
            "usage": self.usage(),
            "system_fingerprint": None,
        }
        return JsonResponse(body)

    # ------------------------------------------------------------- streamed

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        if not self.sent_role:
            delta = {"role": "assistant", **delta}
            self.sent_role = True
        return event(
            {
                "id": self.run.request_id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.run.served.name,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
            }
        )

    def chunk_events(self, delta: Delta) -> list[bytes]:
        events = []
        if delta.text:
            text_delta: dict[str, Any] = {}
            if "text" in self.modalities:
                text_delta["content"] = delta.text
            if "audio" in self.modalities:  # the transcript streams with the text, as OpenAI's does
                text_delta["audio"] = {"id": self.audio_id, "transcript": delta.text}
            if text_delta:
                events.append(self._chunk(text_delta))
        if delta.audio is not None and "audio" in self.modalities:
            data = audio_encoding.pcm16_bytes(delta.audio)
            if self.audio_format == "wav" and not self.sent_wav_header:
                data = audio_encoding.wav_header(delta.sample_rate or 24000) + data
                self.sent_wav_header = True
            events.append(self._chunk({"audio": {"id": self.audio_id, "data": base64.b64encode(data).decode()}}))
        if delta.media and "image" in self.modalities:
            parts = self.image_parts(delta.media)
            if parts:
                events.append(self._chunk({"content": parts}))
        return events

    async def final_events(self, artifacts) -> list[bytes]:
        events = []
        if "audio" in self.modalities and self.run.outcome.audio_chunks:
            final_audio = {"id": self.audio_id, "expires_at": int(time.time()) + AUDIO_EXPIRY_S}
            events.append(self._chunk({"audio": final_audio}))
        events.append(self._chunk({}, self.finish_reason()))
        if self.include_usage:
            events.append(
                event(
                    {
                        "id": self.run.request_id,
                        "object": "chat.completion.chunk",
                        "created": self.created,
                        "model": self.run.served.name,
                        "choices": [],
                        "usage": self.usage(),
                    }
                )
            )
        events.append(DONE)
        return events

    def error_events(self, error: ApiError) -> list[bytes]:
        return [event(error.body()), DONE]
