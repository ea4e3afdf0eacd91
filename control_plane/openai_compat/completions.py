"""POST /v1/completions: a raw prompt in, text out. The prompt reaches the model as written,
chat-templated models included (`options.raw_prompt`: their entry stage applies no template);
only text is produced (`options.modalities`: an omni pipeline's audio stages are left out)."""

from __future__ import annotations

import time
from typing import Any

import msgspec
from django.http import JsonResponse

from control_plane.inference.errors import ApiError
from control_plane.inference.models import Route
from control_plane.inference.outcome import Delta
from control_plane.inference.request_run import RequestRun
from control_plane.inference.targets import served_deployment
from control_plane.openai_compat.bodies import convert, read_json
from control_plane.openai_compat.chat import StreamOptions, sampling_fields
from control_plane.openai_compat.sampling import build_sampling
from control_plane.openai_compat.session import served_view
from control_plane.openai_compat.sse import DONE, event, sse_response
from control_plane.openai_compat.unsupported import refuse_unsupported
from stages.protocol import RequestOptions, StageRequest

COMPLETIONS_MAX_TOKENS = 16
"""OpenAI's API reference gives this endpoint's `max_tokens` this default: a field of the request as
the client sends it, over the stage's own limits (stages.protocol.DEFAULT_MAX_TOKENS is the platform's)."""


class CompletionRequest(msgspec.Struct, kw_only=True):
    model: str
    prompt: str | list[str | int]
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    n: int | None = None
    echo: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int | None = None
    min_tokens: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool | None = None
    sampling_params_list: list[Any] | None = None
    user: str | None = None


def prompt_of(body: CompletionRequest) -> tuple[str | None, list[int] | None]:
    prompt = body.prompt
    if isinstance(prompt, str):
        return prompt, None
    if prompt and all(isinstance(item, int) for item in prompt):
        return None, list(prompt)
    if len(prompt) == 1 and isinstance(prompt[0], str):
        return prompt[0], None
    raise ApiError.invalid("prompt", "'prompt' must be a string, a one-element array of strings or token ids.")


def completions_supported(served) -> None:
    if "text" not in served.output_modalities:
        raise ApiError(
            400, f"The model '{served.name}' does not produce text.", param="model", code="unsupported_modality"
        )


@served_view(Route.COMPLETIONS, "POST")
async def completions(request, run: RequestRun):
    raw = read_json(request)
    run.inputs = {"model": raw.get("model")} if isinstance(raw.get("model"), str) else {}
    body = convert(raw, CompletionRequest)
    refuse_unsupported(raw)
    if body.n is not None and body.n != 1:
        raise ApiError.invalid("n", "Only n=1 is supported.", "unsupported_value")
    if body.max_tokens is not None and body.max_tokens < 1:
        raise ApiError.invalid("max_tokens", f"'max_tokens' must be at least 1, got {body.max_tokens}.")
    prompt, token_ids = prompt_of(body)
    served = await served_deployment(run.caller, body.model, check=completions_supported)
    run.served = served
    stream = bool(body.stream)
    fields = sampling_fields(body)
    fields["max_tokens"] = body.max_tokens or COMPLETIONS_MAX_TOKENS
    entry_sampling, later_sampling, knobs = build_sampling(
        served.pipeline, served.deploy, fields, body.sampling_params_list
    )
    parameters = {k: v for k, v in msgspec.to_builtins(body).items() if k not in ("prompt", "model") and v is not None}
    await run.open(
        served,
        inputs={"prompt": prompt if prompt is not None else token_ids},
        parameters=parameters,
        modalities=["text"],
        stream=stream,
        estimate={"text_tokens": float(fields["max_tokens"])},
    )
    stage_request = StageRequest(
        request_id=run.request_id,
        prompt=prompt,
        prompt_token_ids=token_ids,
        sampling=entry_sampling,
        options=RequestOptions(modalities=["text"], raw_prompt=True, diffusion=knobs),
        arrival_time=time.time(),
    )
    deltas = await run.submit(stage_request, later_sampling)
    created = int(time.time())
    echo = prompt if body.echo and prompt else ""

    def usage() -> dict[str, int]:
        counted = run.usage()
        return {
            "prompt_tokens": counted.prompt_tokens,
            "completion_tokens": counted.completion_tokens,
            "total_tokens": counted.prompt_tokens + counted.completion_tokens,
        }

    def finish_reason() -> str:
        reason = run.outcome.finish_reason
        return reason if reason in ("stop", "length") else "stop"

    def chunk(text: str, reason: str | None = None) -> bytes:
        choice = {"text": text, "index": 0, "logprobs": None, "finish_reason": reason}
        return event({"id": run.request_id, "object": "text_completion", "created": created, "model": served.name,
                      "choices": [choice]})  # fmt: skip

    if not stream:
        await deltas.drain()
        await run.complete()
        choice = {"text": echo + run.outcome.text, "index": 0, "logprobs": None, "finish_reason": finish_reason()}
        return JsonResponse({"id": run.request_id, "object": "text_completion", "created": created,
                             "model": served.name, "choices": [choice], "usage": usage()})  # fmt: skip

    echoed = []

    def on_delta(delta: Delta) -> list[bytes]:
        text = delta.text
        if echo and not echoed:
            echoed.append(True)
            text = echo + text
        return [chunk(text)] if text else []

    async def on_complete(artifacts) -> list[bytes]:
        events = [chunk("", finish_reason())]
        if body.stream_options and body.stream_options.include_usage:
            events.append(event({"id": run.request_id, "object": "text_completion", "created": created,
                                 "model": served.name, "choices": [], "usage": usage()}))  # fmt: skip
        return [*events, DONE]

    def on_error(error: ApiError) -> list[bytes]:
        return [event(error.body()), DONE]

    return sse_response(run.events(deltas, on_delta=on_delta, on_complete=on_complete, on_error=on_error))
