"""/v1/responses (OpenAI's Responses API): create (streamed or not), retrieve, delete.

`input` (a string or message items) with `instructions`, continued from `previous_response_id`
(the earlier turns come from the history rows, see response_store.py); text out, and audio out
too when `modalities` asks for it (`audio: {voice, format}`, as in chat). Sampling:
`temperature`, `top_p`, `max_output_tokens` (the entry stage's), `seed`. The objects and events
are response_objects.py's.
"""

from __future__ import annotations

import time

import msgspec
from asgiref.sync import sync_to_async
from django.http import JsonResponse

from control_plane.inference import audio_encoding
from control_plane.inference.errors import ApiError, openai_endpoint
from control_plane.inference.models import Route
from control_plane.inference.request_run import RequestRun
from control_plane.inference.request_voice import request_voice
from control_plane.inference.targets import served_deployment
from control_plane.openai_compat.access import authenticate
from control_plane.openai_compat.bodies import convert, read_json
from control_plane.openai_compat.chat import check_modalities
from control_plane.openai_compat.chat_inputs import summarize
from control_plane.openai_compat.response_inputs import (
    ResponseRequest,
    checked_messages,
    input_messages,
    validate,
)
from control_plane.openai_compat.response_objects import ResponseView, input_items, stored_object
from control_plane.openai_compat.response_store import delete_response, earlier_turns, stored_response
from control_plane.openai_compat.sampling import build_sampling
from control_plane.openai_compat.session import served_view
from control_plane.openai_compat.sse import sse_response
from stages.protocol import RequestOptions, StageRequest


def audio_format_of(body: ResponseRequest, modalities: list[str], stream: bool) -> str:
    requested = (body.audio.format if body.audio else None) or ("pcm16" if stream else "wav")
    fmt = audio_encoding.normalize_format(requested)
    if fmt is None:
        raise ApiError.invalid("audio.format", f"Unsupported audio format {requested!r}; use one of "
                               f"{audio_encoding.FORMATS}.")  # fmt: skip
    if stream and "audio" in modalities and fmt not in ("pcm16", "wav"):
        raise ApiError.invalid("audio.format", "Streamed audio is sent as pcm16 (or wav); choose one of those.")
    return fmt


@served_view(Route.RESPONSES, "POST")
async def create(request, run: RequestRun):
    raw = read_json(request)
    run.inputs = {"model": raw.get("model")} if isinstance(raw.get("model"), str) else {}
    body = convert(raw, ResponseRequest)
    validate(body)
    new = input_messages(body.input)
    earlier = []
    if body.previous_response_id:
        earlier = await sync_to_async(earlier_turns)(run.caller, body.previous_response_id)
    served = await served_deployment(
        run.caller, body.model, check=lambda found: check_modalities(body.modalities, found.output_modalities)
    )
    run.served = served
    modalities = check_modalities(body.modalities, served.output_modalities)
    stream = bool(body.stream)
    audio_format = audio_format_of(body, modalities, stream)
    new = await checked_messages(new, 0)
    conversation = [*earlier, *new]
    system = [{"role": "system", "content": body.instructions}] if body.instructions else []
    fields = {"temperature": body.temperature, "top_p": body.top_p, "max_tokens": body.max_output_tokens,
              "seed": body.seed}  # fmt: skip
    entry_sampling, later_sampling, _ = build_sampling(served.pipeline, served.deploy, fields, None)
    voice, params = await request_voice(served, run.caller.user, body.audio.voice if body.audio else None)
    parameters = {k: v for k, v in msgspec.to_builtins(body).items()
                  if k not in ("input", "model", "instructions") and v is not None}  # fmt: skip
    parameters["store"] = body.store
    await run.open(
        served,
        inputs={"input": summarize(new), "conversation": summarize(conversation), "instructions": body.instructions},
        parameters=parameters,
        modalities=modalities,
        stream=stream,
        estimate={"text_tokens": float(entry_sampling.max_tokens)} if entry_sampling else {},
    )
    stage_request = StageRequest(request_id=run.request_id, messages=[*system, *conversation],
                                 sampling=entry_sampling, options=RequestOptions(modalities=modalities, voice=voice),
                                 params=params, arrival_time=time.time())  # fmt: skip
    deltas = await run.submit(stage_request, later_sampling)
    view = ResponseView(run, parameters, body.instructions, modalities, audio_format)
    if not stream:
        await deltas.drain()
        await run.complete(audio_format=audio_format)
        return JsonResponse(view.whole())
    return sse_response(run.events(deltas, on_delta=view.delta_events, on_complete=view.closing_events,
                                   on_error=view.error_events, complete_options={"audio_format": audio_format}))  # fmt: skip


@openai_endpoint("GET", "DELETE")
async def item(request, response_id: str):
    caller = await authenticate(request)
    row = await sync_to_async(stored_response)(caller, response_id)
    if request.method == "DELETE":
        await sync_to_async(delete_response)(row)
        return JsonResponse({"id": row.request_id, "object": "response.deleted", "deleted": True})
    return JsonResponse(await sync_to_async(stored_object)(row))


@openai_endpoint("GET")
async def item_inputs(request, response_id: str):
    caller = await authenticate(request)
    order = request.GET.get("order", "desc")
    if order not in ("asc", "desc"):
        raise ApiError.invalid("order", "'order' must be 'asc' or 'desc'.")
    try:
        limit = int(request.GET.get("limit", 20))
    except ValueError:
        raise ApiError.invalid("limit", "'limit' must be an integer.") from None
    if not 1 <= limit <= 100:
        raise ApiError.invalid("limit", "'limit' must be between 1 and 100.")
    row = await sync_to_async(stored_response)(caller, response_id)
    items = input_items(row)
    if order == "desc":
        items.reverse()
    after = request.GET.get("after")
    if after:
        ids = [entry["id"] for entry in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    page = items[:limit]
    return JsonResponse({"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                         "last_id": page[-1]["id"] if page else None, "has_more": len(items) > limit})  # fmt: skip
