"""The decorator of every serving /v1 view: authenticate, give the view a RequestRun, and make
sure every failure is recorded and answered in OpenAI's shape.

    @served_view(Route.CHAT, "POST")
    async def chat_completions(request, run: RequestRun):
        ... validate (ApiError) ...
        await run.open(served, inputs=..., parameters=..., modalities=..., estimate=...)
        deltas = await run.submit(stage_request, later_sampling)
        ... render the deltas; run.complete(...) ...

The lifecycle itself (history row, quota, usage) is control_plane/inference/request_run.py.
"""

from __future__ import annotations

import asyncio
import functools
import uuid

from control_plane.inference.errors import error_response, openai_endpoint
from control_plane.inference.request_run import RequestRun
from control_plane.openai_compat.access import authenticate

ID_PREFIXES = {
    "chat.completions": "chatcmpl-",
    "completions": "cmpl-",
    "audio.speech": "speech-",
    "audio.transcriptions": "transcription-",
    "audio.translations": "translation-",
    "responses": "resp_",
    "images.generations": "img-",
    "images.edits": "imgedit-",
    "videos": "video_",
}


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def served_view(route: str, *methods: str):
    """An async /v1 view that serves a request: 401/403 are answered without a row; every
    later failure closes the run's row `failed` (a cancelled view: `cancelled`). Every answer
    names its history row in `X-Request-Id` (`/api/requests/{id}`)."""

    def decorate(view):
        @openai_endpoint(*methods)
        @functools.wraps(view)
        async def wrapper(request, *args, **kwargs):
            caller = await authenticate(request)
            run = RequestRun(route=route, request_id=new_id(ID_PREFIXES.get(route, "req-")), caller=caller)
            try:
                response = await view(request, run, *args, **kwargs)
            except asyncio.CancelledError:
                await asyncio.shield(run.cancel())
                raise
            except Exception as error:
                await run.fail(error)
                response = error_response(error)
            response.setdefault("X-Request-Id", run.request_id)
            return with_rate_limit_headers(response, run.charge.headers)

        return wrapper

    return decorate


def with_rate_limit_headers(response, headers: dict[str, str]):
    """OpenAI sends x-ratelimit-* on every response, not only on 429s: here they are the
    limits as the admission found them (a refusal's 429 already carries its own). Streamed
    responses get them too: their headers go out before the first event."""
    for name, value in headers.items():
        response.setdefault(name, value)
    return response
