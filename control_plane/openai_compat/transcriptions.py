"""POST /v1/audio/transcriptions and /v1/audio/translations (multipart): speech in, text out.

Served by any pipeline whose entry stage takes audio and emits text (the omni thinkers): the
audio goes to it as an `input_audio` part beside the instruction (transcribe as spoken, or
answer in English), with `modalities: ["text"]` so the stages that speak (talker, code2wav)
are left out. `response_format`: json (default), text, srt, vtt, verbose_json; a transcription
with `stream=true` answers `transcript.text.delta` events, then `transcript.text.done` with the
text and usage. The uploaded audio is kept with the history row and counted as audio in.
"""

from __future__ import annotations

import time

import msgspec

from control_plane.inference.errors import ApiError
from control_plane.inference.models import Route
from control_plane.inference.outcome import Delta
from control_plane.inference.request_run import RequestRun
from control_plane.inference.targets import Served, served_deployment
from control_plane.openai_compat.sampling import build_sampling
from control_plane.openai_compat.session import served_view
from control_plane.openai_compat.sse import event, sse_response
from control_plane.openai_compat.transcript_formats import render, token_usage
from control_plane.openai_compat.transcription_inputs import (
    TranscriptionRequest,
    instruction,
    parse,
    read_audio,
    read_transcription_form,
    transcription_messages,
    validate,
)
from stages.protocol import RequestOptions, StageRequest


def require_hearing(served: Served) -> None:
    entry = served.pipeline.entry_stage
    if "audio" not in entry.inputs or entry.output != "text":
        raise ApiError(
            400,
            f"The model '{served.name}' does not turn speech into text: its first stage takes {list(entry.inputs)} "
            f"and emits {entry.output or 'nothing the client sees'}.",
            param="model",
            code="unsupported_modality",
        )


@served_view(Route.TRANSCRIPTIONS, "POST")
async def transcriptions(request, run: RequestRun):
    return await _serve(request, run, translation=False)


@served_view(Route.TRANSLATIONS, "POST")
async def translations(request, run: RequestRun):
    return await _serve(request, run, translation=True)


async def _serve(request, run: RequestRun, *, translation: bool):
    form, files = read_transcription_form(request)
    run.inputs = {"model": form["model"]} if form.get("model") else {}
    body = parse(form)
    audio = read_audio(files)
    stream = validate(body, translation=translation)
    served = await served_deployment(run.caller, body.model, check=require_hearing)
    run.served = served
    fields = {"temperature": body.temperature, "max_tokens": body.max_tokens, "seed": body.seed}
    entry_sampling, later_sampling, _ = build_sampling(served.pipeline, served.deploy, fields, None)
    options = RequestOptions(modalities=["text"], language=body.language if body.language and not translation else None)
    text = instruction(body, translation=translation)
    parameters = {k: v for k, v in msgspec.to_builtins(body).items() if k != "model" and v is not None}
    run.audio_in = (audio.samples, audio.sample_rate)
    await run.open(served, inputs={"file": audio.summary(), "instruction": text}, parameters=parameters,
                   modalities=["text"], stream=stream,
                   estimate={"text_tokens": float(entry_sampling.max_tokens) if entry_sampling else 0.0})  # fmt: skip
    stage_request = StageRequest(request_id=run.request_id, messages=transcription_messages(audio, text),
                                 sampling=entry_sampling, options=options,
                                 arrival_time=time.time())  # fmt: skip
    deltas = await run.submit(stage_request, later_sampling)
    if stream:
        return sse_response(_events(run, deltas))
    await deltas.drain()
    await run.complete()
    return render(body.response_format, run.outcome.text.strip(), run.usage(),
                  task="translate" if translation else "transcribe", language=_language(body, translation),
                  duration=audio.duration_s, temperature=body.temperature or 0.0)  # fmt: skip


def _language(body: TranscriptionRequest, translation: bool) -> str:
    if translation:
        return "english"
    return body.language or "unknown"


def _events(run: RequestRun, deltas):
    def on_delta(delta: Delta) -> list[bytes]:
        if not delta.text:
            return []
        return [event({"type": "transcript.text.delta", "delta": delta.text, "logprobs": None},
                      "transcript.text.delta")]  # fmt: skip

    async def on_complete(artifacts) -> list[bytes]:
        done = {"type": "transcript.text.done", "text": run.outcome.text.strip(), "logprobs": None,
                "usage": token_usage(run.usage())}  # fmt: skip
        return [event(done, "transcript.text.done")]

    def on_error(error: ApiError) -> list[bytes]:
        return [event({"type": "error", **error.body()}, "error")]

    return run.events(deltas, on_delta=on_delta, on_complete=on_complete, on_error=on_error)
