"""One request to each HTTP endpoint the benchmark drives, read as the client sees it:
/v1/chat/completions (SSE, text and audio deltas, usage), /v1/audio/speech (SSE audio deltas) and
/v1/images/generations (one JSON answer). Each returns a RequestRecord; a failure (an error status,
an error event, a broken stream) is recorded with the server's own message, never raised."""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from client.bench.pcm import PcmCounter
from client.bench.prompts import Prompt
from client.bench.record import RequestRecord
from client.bench.sse import sse_events


@dataclass(frozen=True)
class Shape:
    """What every request of a run asks for, apart from its prompt."""

    model: str
    modalities: tuple[str, ...] = ("text",)
    output_len: int | None = None  # the entry stage's max_tokens (text tokens)
    ignore_eos: bool = False
    later_stages: dict[int, dict[str, Any]] = field(default_factory=dict)  # sampling by stage index (talker cap)
    stage_count: int = 1
    extra_body: dict[str, Any] = field(default_factory=dict)

    def max_tokens(self, prompt: Prompt) -> int | None:
        return prompt.output_len or self.output_len

    def sampling_params_list(self, entry: dict[str, Any] | None = None) -> list[dict[str, Any] | None] | None:
        if not self.later_stages and not entry:
            return None
        return [entry or None] + [self.later_stages.get(index) for index in range(1, self.stage_count)]


def error_message(response: httpx.Response) -> str:
    """The server's own message of an error answer (OpenAI shape or DRF's), with the status."""
    try:
        body = response.json()
    except ValueError:
        body = None
    message = None
    if isinstance(body, dict):
        error = body.get("error")
        message = error.get("message") if isinstance(error, dict) else error or body.get("detail")
    return f"HTTP {response.status_code}: {message or response.text[:300] or response.reason_phrase}"


def transport_message(error: Exception) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


async def chat(http: httpx.AsyncClient, shape: Shape, prompt: Prompt) -> RequestRecord:
    body: dict[str, Any] = {
        "model": shape.model,
        "messages": prompt.chat_messages(),
        "modalities": list(shape.modalities),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if shape.max_tokens(prompt):
        body["max_tokens"] = shape.max_tokens(prompt)
    if shape.ignore_eos:
        body["ignore_eos"] = True
    if "audio" in shape.modalities:
        body["audio"] = {"format": "wav"}  # the first delta carries the header: the sample rate
    if (per_stage := shape.sampling_params_list()) is not None:
        body["sampling_params_list"] = per_stage
    body.update(shape.extra_body)
    record = RequestRecord(input_len=prompt.input_len)
    pcm = PcmCounter()
    record.start = time.perf_counter()
    try:
        async with http.stream("POST", "/v1/chat/completions", json=body) as response:
            record.request_id = response.headers.get("x-request-id")
            if response.status_code != 200:
                await response.aread()
                return record.fail(error_message(response))
            async for _, data in sse_events(response):
                now = time.perf_counter()
                if data == "[DONE]":
                    record.end = now
                    break
                _chat_chunk(record, pcm, json.loads(data), now)
    except (httpx.HTTPError, OSError, ValueError) as error:
        return record.fail(transport_message(error))
    if record.end is None:
        record.fail("the stream ended before [DONE]")
    return record


def _chat_chunk(record: RequestRecord, pcm: PcmCounter, chunk: dict, now: float) -> None:
    if "error" in chunk:
        error = chunk["error"]
        record.fail(f"error event: {error.get('message') if isinstance(error, dict) else error}")
        return
    record.request_id = record.request_id or chunk.get("id")
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        content, audio = delta.get("content"), delta.get("audio") or {}
        if isinstance(content, list):
            record.images += sum(1 for part in content if part.get("type") == "image_url")
            content = "".join(part.get("text", "") for part in content if part.get("type") == "text")
        if content or audio.get("transcript"):  # with text and audio both, one chunk carries both
            record.on_text(now)
        if audio.get("data"):
            record.on_audio(now, pcm.add(base64.b64decode(audio["data"])))
    if usage := chunk.get("usage"):
        details = usage.get("completion_tokens_details") or {}
        record.prompt_tokens = usage.get("prompt_tokens")
        record.text_tokens = details.get("text_tokens", usage.get("completion_tokens"))
        record.audio_tokens = details.get("audio_tokens")


async def speech(http: httpx.AsyncClient, shape: Shape, prompt: Prompt) -> RequestRecord:
    body: dict[str, Any] = {"model": shape.model, "input": prompt.plain_text(), "response_format": "wav",
                            "stream_format": "sse"}  # fmt: skip
    entry = {"ignore_eos": True} if shape.ignore_eos else {}
    if shape.max_tokens(prompt):
        entry["max_tokens"] = shape.max_tokens(prompt)
    if (per_stage := shape.sampling_params_list(entry)) is not None:
        body["sampling_params_list"] = per_stage
    body.update(shape.extra_body)
    record = RequestRecord(input_len=prompt.input_len)
    pcm = PcmCounter()
    record.start = time.perf_counter()
    try:
        async with http.stream("POST", "/v1/audio/speech", json=body) as response:
            record.request_id = response.headers.get("x-request-id")
            if response.status_code != 200:
                await response.aread()
                return record.fail(error_message(response))
            async for _, data in sse_events(response):
                now, event = time.perf_counter(), json.loads(data)
                if event.get("type") == "speech.audio.delta":
                    record.on_audio(now, pcm.add(base64.b64decode(event["audio"])))
                elif event.get("type") == "speech.audio.done":
                    usage = event.get("usage") or {}
                    record.prompt_tokens, record.audio_tokens = usage.get("input_tokens"), usage.get("output_tokens")
                    record.end = now
                elif "error" in event:
                    return record.fail(f"error event: {event['error'].get('message')}")
    except (httpx.HTTPError, OSError, ValueError) as error:
        return record.fail(transport_message(error))
    if record.end is None:
        record.fail("the stream ended before speech.audio.done")
    return record


async def images(http: httpx.AsyncClient, shape: Shape, prompt: Prompt) -> RequestRecord:
    body: dict[str, Any] = {"model": shape.model, "prompt": prompt.plain_text(), "n": 1,
                            "response_format": "b64_json", **shape.extra_body}  # fmt: skip
    record = RequestRecord(input_len=prompt.input_len)
    record.start = time.perf_counter()
    try:
        response = await http.post("/v1/images/generations", json=body)
    except (httpx.HTTPError, OSError) as error:
        return record.fail(transport_message(error))
    record.request_id = response.headers.get("x-request-id")
    if response.status_code != 200:
        return record.fail(error_message(response))
    record.end = time.perf_counter()
    record.images = len(response.json().get("data") or [])
    return record
