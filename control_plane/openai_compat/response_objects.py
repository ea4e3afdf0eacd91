"""OpenAI Response objects and their stream events, for a running request and for a stored row.

The output is one assistant message: an `output_text` part (when text is asked for) and, when
audio is, an `output_audio` part ({data: base64 in `audio.format`, transcript, format}). A
streamed response sends `response.created`, `response.in_progress`, `response.output_item.added`,
`response.content_part.added`, `response.output_text.delta`... (`response.audio.delta` and
`response.audio.transcript.delta` for audio), then the `.done` events and `response.completed`
(`response.incomplete` when `max_output_tokens` cut it, `response.failed` on an error), each
with its `sequence_number`.
"""

from __future__ import annotations

import base64
import time
from typing import Any

from control_plane.inference import audio_encoding
from control_plane.inference.errors import ApiError
from control_plane.inference.models import InferenceRequest, Status
from control_plane.inference.outcome import Delta, Usage
from control_plane.inference.request_run import RequestRun
from control_plane.openai_compat.sse import event

ECHOED = ("temperature", "top_p", "max_output_tokens", "previous_response_id", "store")
STATUSES = {Status.QUEUED: "queued", Status.RUNNING: "in_progress", Status.COMPLETED: "completed",
            Status.FAILED: "failed", Status.CANCELLED: "cancelled"}  # fmt: skip


def token_usage(usage: Usage) -> dict[str, Any]:
    output = usage.completion_tokens + usage.audio_tokens
    return {"input_tokens": usage.prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.prompt_tokens + output}  # fmt: skip


def stored_usage(usage: dict[str, Any]) -> dict[str, Any]:
    text, audio = usage.get("text") or {}, usage.get("audio") or {}
    return token_usage(Usage(prompt_tokens=text.get("prompt_tokens", 0),
                             completion_tokens=text.get("completion_tokens", 0), audio_tokens=audio.get("tokens", 0)))  # fmt: skip


def message_id(response_id: str) -> str:
    return f"msg_{response_id.removeprefix('resp_')}"


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def audio_part(data: bytes | None, transcript: str, fmt: str) -> dict[str, Any]:
    encoded = base64.b64encode(data).decode() if data else ""
    return {"type": "output_audio", "data": encoded, "transcript": transcript, "format": fmt}


def message(response_id: str, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "message", "id": message_id(response_id), "status": status, "role": "assistant",
            "content": content}  # fmt: skip


def response_object(
    *,
    response_id: str,
    created_at: float,
    status: str,
    model: str,
    parameters: dict[str, Any],
    instructions: str | None,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    error: dict[str, Any] | None = None,
    incomplete: str | None = None,
) -> dict[str, Any]:
    body = {
        "id": response_id,
        "object": "response",
        "created_at": int(created_at),
        "status": status,
        "model": model,
        "output": output,
        "instructions": instructions,
        "error": {"code": error.get("code") or "server_error", "message": error.get("message", "")} if error else None,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "usage": usage,
        "metadata": parameters.get("metadata") or {},
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "modalities": parameters.get("modalities") or ["text"],
    }
    for name in ECHOED:
        body[name] = parameters.get(name)
    if body["store"] is None:
        body["store"] = True
    return body


def stored_object(row: InferenceRequest) -> dict[str, Any]:
    """The response as its history row has it (GET /v1/responses/{id})."""
    parameters = row.parameters or {}
    modalities = parameters.get("modalities") or ["text"]
    status = STATUSES.get(row.status, "failed")
    incomplete = None
    if row.status == Status.COMPLETED and row.finish_reason == "length":
        status, incomplete = "incomplete", "max_output_tokens"
    content = [text_part(row.output_text)] if "text" in modalities else []
    audio = next((a for a in row.artifacts.all() if a.kind == "audio" and a.meta.get("direction") != "in"), None)
    if "audio" in modalities and audio is not None:
        content.append(audio_part(_read(audio), row.output_text, audio.meta.get("format", "wav")))
    output = [message(row.request_id, "completed", content)] if row.is_final and row.status != Status.FAILED else []
    return response_object(
        response_id=row.request_id, created_at=row.created_at.timestamp(), status=status, model=row.deployment_name,
        parameters=parameters, instructions=(row.inputs or {}).get("instructions"), output=output,
        usage=stored_usage(row.usage) if row.is_final else None, error=row.error, incomplete=incomplete,
    )  # fmt: skip


def _read(artifact) -> bytes | None:
    """The artifact's bytes; None when its file is gone (retention, storage trouble)."""
    try:
        with artifact.file.open("rb") as handle:
            return handle.read()
    except OSError:
        return None


def input_items(row: InferenceRequest) -> list[dict[str, Any]]:
    """The response's own input (not the earlier turns) as message items, in order; media as the
    history keeps them (type and size, no bytes)."""
    items = []
    for index, message in enumerate((row.inputs or {}).get("input") or []):
        content = message.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        items.append({"type": "message", "id": f"{message_id(row.request_id)}_{index}", "status": "completed",
                      "role": message.get("role"), "content": [_input_part(part) for part in parts]})  # fmt: skip
    return items


def _input_part(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind == "text":
        return {"type": "input_text", "text": part.get("text", "")}
    if kind == "image_url":
        return {"type": "input_image", "image_url": part["image_url"]["url"], "detail": "auto"}
    return {"type": f"input_{kind.removeprefix('input_')}", **{k: v for k, v in part.items() if k != "type"}}


class ResponseView:
    """Renders one running request as a Response object, whole or as stream events."""

    def __init__(self, run: RequestRun, parameters: dict[str, Any], instructions: str | None,
                 modalities: list[str], audio_format: str):  # fmt: skip
        self.run = run
        self.parameters = {**parameters, "modalities": modalities}
        self.instructions = instructions
        self.modalities = modalities
        self.audio_format = audio_format
        self.created_at = time.time()
        self.sequence = 0
        self.opened = False
        self.sent_wav_header = False

    def _object(self, status: str, output: list[dict[str, Any]], usage=None, error=None, incomplete=None):
        return response_object(
            response_id=self.run.request_id, created_at=self.created_at, status=status, model=self.run.served.name,
            parameters=self.parameters, instructions=self.instructions, output=output, usage=usage, error=error,
            incomplete=incomplete,
        )  # fmt: skip

    def _ending(self) -> tuple[str, str | None]:
        if self.run.outcome.ending_reason == "length":
            return "incomplete", "max_output_tokens"
        return "completed", None

    def _content(self, audio: bytes | None) -> list[dict[str, Any]]:
        text = self.run.outcome.text
        content = [text_part(text)] if "text" in self.modalities else []
        if "audio" in self.modalities:
            content.append(audio_part(audio, text, self.audio_format))
        return content

    def whole(self) -> dict[str, Any]:
        outcome = self.run.outcome
        audio = None
        if "audio" in self.modalities and outcome.audio is not None:
            audio = audio_encoding.encode_audio(outcome.audio, outcome.sample_rate, self.audio_format)
        status, incomplete = self._ending()
        output = [message(self.run.request_id, "completed", self._content(audio))]
        return self._object(status, output, token_usage(self.run.usage()), incomplete=incomplete)

    # ------------------------------------------------------------- streamed

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event(data, kind)

    def _where(self, index: int) -> dict[str, Any]:
        return {"item_id": message_id(self.run.request_id), "output_index": 0, "content_index": index}

    def _text_index(self) -> int:
        return 0

    def _audio_index(self) -> int:
        return 1 if "text" in self.modalities else 0

    def opening(self) -> list[bytes]:
        self.opened = True
        parts = [text_part("")] if "text" in self.modalities else []
        if "audio" in self.modalities:
            parts.append(audio_part(None, "", self.audio_format))
        events = [
            self._event("response.created", response=self._object("in_progress", [])),
            self._event("response.in_progress", response=self._object("in_progress", [])),
            self._event("response.output_item.added", output_index=0,
                        item=message(self.run.request_id, "in_progress", [])),
        ]  # fmt: skip
        for index, part in enumerate(parts):
            events.append(self._event("response.content_part.added", **self._where(index), part=part))
        return events

    def delta_events(self, delta: Delta) -> list[bytes]:
        events = [] if self.opened else self.opening()
        if delta.text and "text" in self.modalities:
            events.append(self._event("response.output_text.delta", **self._where(self._text_index()),
                                      delta=delta.text, logprobs=[]))  # fmt: skip
        if delta.text and "audio" in self.modalities:
            events.append(self._event("response.audio.transcript.delta", response_id=self.run.request_id,
                                      delta=delta.text))  # fmt: skip
        if delta.audio is not None and "audio" in self.modalities:
            data = audio_encoding.pcm16_bytes(delta.audio)
            if self.audio_format == "wav" and not self.sent_wav_header:
                data = audio_encoding.wav_header(delta.sample_rate or 24000) + data
                self.sent_wav_header = True
            events.append(self._event("response.audio.delta", response_id=self.run.request_id,
                                      delta=base64.b64encode(data).decode()))  # fmt: skip
        return events

    async def closing_events(self, artifacts) -> list[bytes]:
        events = [] if self.opened else self.opening()
        text = self.run.outcome.text
        if "text" in self.modalities:
            events.append(self._event("response.output_text.done", **self._where(self._text_index()), text=text,
                                      logprobs=[]))  # fmt: skip
            events.append(self._event("response.content_part.done", **self._where(self._text_index()),
                                      part=text_part(text)))  # fmt: skip
        if "audio" in self.modalities:
            events.append(self._event("response.audio.transcript.done", response_id=self.run.request_id))
            events.append(self._event("response.audio.done", response_id=self.run.request_id))
            events.append(self._event("response.content_part.done", **self._where(self._audio_index()),
                                      part=audio_part(None, text, self.audio_format)))  # fmt: skip
        content = self._content(None)
        events.append(self._event("response.output_item.done", output_index=0,
                                  item=message(self.run.request_id, "completed", content)))  # fmt: skip
        status, incomplete = self._ending()
        final = self._object(status, [message(self.run.request_id, "completed", content)],
                             token_usage(self.run.usage()), incomplete=incomplete)  # fmt: skip
        events.append(self._event(f"response.{status}", response=final))
        return events

    def error_events(self, error: ApiError) -> list[bytes]:
        events = [] if self.opened else self.opening()
        body = error.body()["error"]
        events.append(self._event("error", code=body["code"], message=body["message"], param=body["param"]))
        events.append(self._event("response.failed", response=self._object("failed", [], error=body)))
        return events
