"""POST /v1/audio/speech: text in, audio out, for pipelines that produce audio.

- plain: the whole file in `response_format` (mp3 by default, as OpenAI; wav, flac, opus,
  pcm/pcm16), `speed` 0.25-4 applied by resampling;
- `stream_format: "sse"` (or `stream: true`): `speech.audio.delta` events with base64
  audio as it is produced, then `speech.audio.done` with usage (OpenAI's SSE shape);
- `stream_format: "audio"`: the raw bytes, chunked as they are produced (pcm16, or wav
  with a streaming header).
Streaming sends pcm16 or wav only, at speed 1.0.

The text reaches the pipeline as the prompt (or one user message when the pipeline needs
the chat template), with `voice` and `instructions` in the request's options.
"""

from __future__ import annotations

import base64
import time

import msgspec
from django.http import HttpResponse, StreamingHttpResponse

from control_plane.inference import audio_encoding
from control_plane.inference.errors import ApiError
from control_plane.inference.models import Route
from control_plane.inference.outcome import Delta
from control_plane.inference.request_run import Deltas, RequestRun
from control_plane.inference.request_voice import request_voice
from control_plane.inference.targets import served_deployment
from control_plane.openai_compat.bodies import convert, read_json
from control_plane.openai_compat.sampling import build_sampling
from control_plane.openai_compat.session import served_view
from control_plane.openai_compat.sse import event, sse_response
from stages.protocol import RequestOptions, StageRequest

MAX_INPUT_CHARS = 4096


class SpeechRequest(msgspec.Struct, kw_only=True):
    model: str
    input: str
    voice: str | None = None
    instructions: str | None = None
    response_format: str = "mp3"
    speed: float = 1.0
    stream: bool | None = None
    stream_format: str | None = None
    language: str | None = None
    max_tokens: int | None = None
    seed: int | None = None
    sampling_params_list: list | None = None


def validate(body: SpeechRequest) -> tuple[str, str | None]:
    """(audio format, stream mode: None, "sse" or "audio")."""
    if not body.input.strip():
        raise ApiError.invalid("input", "'input' cannot be empty.")
    if len(body.input) > MAX_INPUT_CHARS:
        raise ApiError.invalid("input", f"'input' is limited to {MAX_INPUT_CHARS} characters, got {len(body.input)}.")
    fmt = audio_encoding.normalize_format(body.response_format)
    if fmt is None:
        raise ApiError.invalid(
            "response_format",
            f"Unsupported response_format {body.response_format!r}; use one of {audio_encoding.FORMATS} (or 'pcm').",
        )
    if not 0.25 <= body.speed <= 4.0:
        raise ApiError.invalid("speed", f"'speed' must be between 0.25 and 4.0, got {body.speed}.")
    if body.stream_format not in (None, "sse", "audio"):
        raise ApiError.invalid(
            "stream_format", f"'stream_format' must be 'sse' or 'audio', got {body.stream_format!r}."
        )
    mode = body.stream_format or ("sse" if body.stream else None)
    if mode is not None:
        if fmt not in ("pcm16", "wav"):
            raise ApiError.invalid("response_format", "Streamed speech is sent as pcm (pcm16) or wav.")
        if body.speed != 1.0:
            raise ApiError.invalid("speed", "'speed' must be 1.0 when streaming.")
    return fmt, mode


def require_audio(served) -> None:
    if "audio" not in served.output_modalities:
        raise ApiError(
            400,
            f"The model '{served.name}' does not produce audio (it produces {served.output_modalities}).",
            param="model",
            code="unsupported_modality",
        )


@served_view(Route.SPEECH, "POST")
async def speech(request, run: RequestRun):
    raw = read_json(request)
    run.inputs = {"model": raw.get("model")} if isinstance(raw.get("model"), str) else {}
    body = convert(raw, SpeechRequest)
    fmt, mode = validate(body)
    served = await served_deployment(run.caller, body.model, check=require_audio)
    run.served = served
    fields = {"max_tokens": body.max_tokens, "seed": body.seed}
    entry_sampling, later_sampling, knobs = build_sampling(
        served.pipeline, served.deploy, fields, body.sampling_params_list
    )
    voice, params = await request_voice(served, run.caller.user, body.voice)
    options = RequestOptions(modalities=["audio"], voice=voice, language=body.language or None,
                             instructions=body.instructions or None, diffusion=knobs)  # fmt: skip
    parameters = {k: v for k, v in msgspec.to_builtins(body).items() if k not in ("input", "model") and v is not None}
    await run.open(served, inputs={"input": body.input}, parameters=parameters, modalities=["audio"],
                   stream=mode is not None)  # fmt: skip
    if served.pipeline.needs_chat_template:
        text_input = {"messages": [{"role": "user", "content": body.input}]}
    else:
        text_input = {"prompt": body.input}
    stage_request = StageRequest(
        request_id=run.request_id,
        sampling=entry_sampling,
        options=options,
        params=params,
        arrival_time=time.time(),
        **text_input,
    )
    deltas = await run.submit(stage_request, later_sampling)
    headers = {"X-Request-Id": run.request_id}
    if mode is None:
        outcome = await deltas.drain()
        if outcome.audio is None:
            raise ApiError(500, "The model produced no audio for this input.", code="no_audio")
        audio = audio_encoding.time_stretch(outcome.audio, body.speed)
        data = audio_encoding.encode_audio(audio, outcome.sample_rate, fmt)
        await run.complete(audio_format=fmt)
        response = HttpResponse(data, content_type=audio_encoding.MIME_TYPES[fmt])
        response["X-Sample-Rate"] = str(outcome.sample_rate)
        for name, value in headers.items():
            response[name] = value
        return response
    if mode == "sse":
        return sse_response(_sse(run, deltas, fmt), headers)
    response = StreamingHttpResponse(_raw(run, deltas, fmt), content_type=audio_encoding.MIME_TYPES[fmt])
    for name, value in headers.items():
        response[name] = value
    return response


def _encoder(fmt: str):
    header_sent = []

    def encode(delta: Delta) -> bytes:
        if delta.audio is None:
            return b""
        data = audio_encoding.pcm16_bytes(delta.audio)
        if fmt == "wav" and not header_sent:
            header_sent.append(True)
            data = audio_encoding.wav_header(delta.sample_rate or 24000) + data
        return data

    return encode


def _sse(run: RequestRun, deltas: Deltas, fmt: str):
    encode = _encoder(fmt)
    response_format = "pcm" if fmt == "pcm16" else fmt

    def on_delta(delta: Delta) -> list[bytes]:
        data = encode(delta)
        if not data:
            return []
        audio = base64.b64encode(data).decode()
        return [event({"type": "speech.audio.delta", "audio": audio, "response_format": response_format},
                      "speech.audio.delta")]  # fmt: skip

    async def on_complete(artifacts) -> list[bytes]:
        counted = run.usage()
        usage = {
            "input_tokens": counted.prompt_tokens,
            "output_tokens": counted.audio_tokens,
            "total_tokens": counted.prompt_tokens + counted.audio_tokens,
            "audio_seconds": round(counted.audio_seconds, 4),
            "sample_rate": counted.sample_rate,
        }
        return [event({"type": "speech.audio.done", "usage": usage}, "speech.audio.done")]

    def on_error(error: ApiError) -> list[bytes]:
        return [event({"type": "speech.audio.error", **error.body()}, "speech.audio.error")]

    return run.events(deltas, on_delta=on_delta, on_complete=on_complete, on_error=on_error,
                      complete_options={"audio_format": fmt})  # fmt: skip


def _raw(run: RequestRun, deltas: Deltas, fmt: str):
    encode = _encoder(fmt)

    def on_delta(delta: Delta) -> list[bytes]:
        data = encode(delta)
        return [data] if data else []

    async def on_complete(artifacts) -> list[bytes]:
        return []

    def on_error(error: ApiError) -> list[bytes]:
        return []  # the status is already sent; the truncated body and the history row tell

    return run.events(deltas, on_delta=on_delta, on_complete=on_complete, on_error=on_error,
                      complete_options={"audio_format": fmt})  # fmt: skip
