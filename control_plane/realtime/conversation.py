"""The conversation: ordered items (user and assistant messages) and what the thinker sees.

User audio is kept at the model's input rate (16 kHz float32) for the prompt and in the
client's input format for `conversation.item.retrieve`. Assistant items keep their
transcript (or text) and the audio sent to the client; `truncate` cuts both to what the
user heard. The prompt of a response is every item in order: user audio as `input_audio`
parts (16-bit WAV), assistant turns as their text.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from control_plane.inference.audio_encoding import encode_audio
from control_plane.realtime.events import ProtocolError, new_id
from control_plane.realtime.session_config import MODEL_INPUT_RATE
from stages.resampling import resample

# pipelines whose first stage reads text only: a user's message reaches them as plain text (the
# chat templates of text models need not know content parts), a user's audio as a short note
TEXT_ONLY_FAMILIES = frozenset({"echo", "llm"})


@dataclass
class Part:
    type: str  # input_text, input_audio, output_text, output_audio
    text: str = ""
    samples: np.ndarray | None = None  # input audio at MODEL_INPUT_RATE; output audio at the client's rate
    rate: int = MODEL_INPUT_RATE
    transcript: str | None = None
    audio_ms: int | None = None  # output audio kept after a truncate

    def ga(self, include_audio: bool = False, encode=None) -> dict:
        if self.type in ("input_text", "output_text"):
            return {"type": self.type, "text": self.text}
        body: dict[str, Any] = {"type": self.type, "transcript": self.transcript}
        if include_audio and self.samples is not None and encode is not None:
            body["audio"] = base64.b64encode(encode(self.samples, self.rate)).decode()
        return body

    @property
    def seconds(self) -> float:
        return 0.0 if self.samples is None else self.samples.size / self.rate


@dataclass
class Item:
    id: str
    role: str
    parts: list[Part] = field(default_factory=list)
    status: str = "completed"
    response_id: str | None = None

    def ga(self, include_audio: bool = False, encode=None) -> dict:
        return {
            "id": self.id,
            "object": "realtime.item",
            "type": "message",
            "status": self.status,
            "role": self.role,
            "content": [part.ga(include_audio, encode) for part in self.parts],
        }

    @property
    def text(self) -> str:
        return "".join(part.transcript or "" if "audio" in part.type else part.text for part in self.parts)


class Conversation:
    def __init__(self):
        self.id = new_id("conv")
        self.items: list[Item] = []

    def add(self, item: Item, previous_item_id: str | None = None) -> str | None:
        """Insert after `previous_item_id` (None: at the end; "root": first); returns the item before it."""
        if any(existing.id == item.id for existing in self.items):
            raise ProtocolError(f"An item with id '{item.id}' already exists.", param="item.id", code="duplicate_id")
        if previous_item_id is None:
            index = len(self.items)
        elif previous_item_id == "root":
            index = 0
        else:
            index = self.index_of(previous_item_id, "previous_item_id") + 1
        self.items.insert(index, item)
        return self.items[index - 1].id if index > 0 else None

    def index_of(self, item_id: Any, param: str = "item_id") -> int:
        for index, item in enumerate(self.items):
            if item.id == item_id:
                return index
        raise ProtocolError(f"Item with item_id '{item_id}' not found.", param=param, code="item_not_found")

    def get(self, item_id: Any) -> Item:
        return self.items[self.index_of(item_id)]

    def delete(self, item_id: Any) -> None:
        del self.items[self.index_of(item_id)]

    def last_id(self) -> str | None:
        return self.items[-1].id if self.items else None


def prompt_messages(items: list[Item], instructions: str, family: str) -> list[dict]:
    """The thinker's messages: the instructions, then every item in order."""
    messages: list[dict] = [{"role": "system", "content": instructions}] if instructions else []
    for item in items:
        message = _message(item, family)
        if message is not None:
            messages.append(message)
    return messages


def _message(item: Item, family: str) -> dict | None:
    if item.role == "assistant":
        text = item.text
        return {"role": "assistant", "content": text} if text else None
    parts = []
    for part in item.parts:
        if part.type == "input_text":
            parts.append({"type": "text", "text": part.text})
        elif part.type == "input_audio" and part.samples is not None:
            if family in TEXT_ONLY_FAMILIES:
                parts.append({"type": "text", "text": f"[user audio {part.seconds:.2f} s]"})
                continue
            data = base64.b64encode(encode_audio(part.samples, part.rate, "wav")).decode()
            parts.append({"type": "input_audio", "input_audio": {"data": data, "format": "wav"}})
    if not parts:
        return None
    if family in TEXT_ONLY_FAMILIES:
        return {"role": item.role, "content": "\n".join(part["text"] for part in parts)}
    return {"role": item.role, "content": parts}


# ------------------------------------------------------------------ items from clients


def item_from_client(body: Any, input_format, param: str = "item") -> Item:
    """A `conversation.item.create` item (GA or beta content part names)."""
    if not isinstance(body, dict):
        raise ProtocolError(f"'{param}' must be an object.", param=param)
    kind = body.get("type", "message")
    if kind != "message":
        raise ProtocolError(f"Item type {kind!r} is not supported (only 'message').", param=f"{param}.type")
    role = body.get("role")
    if role not in ("user", "assistant", "system"):
        raise ProtocolError(f"Invalid '{param}.role': expected user, assistant or system.", param=f"{param}.role")
    content = body.get("content")
    if not isinstance(content, list) or not content:
        raise ProtocolError(f"'{param}.content' must be a non-empty list.", param=f"{param}.content")
    item_id = body.get("id") or new_id("item")
    if not isinstance(item_id, str) or len(item_id) > 64:
        raise ProtocolError(f"Invalid '{param}.id'.", param=f"{param}.id")
    parts = [_part(part, role, input_format, f"{param}.content[{index}]") for index, part in enumerate(content)]
    return Item(id=item_id, role=role, parts=parts)


def _part(part: Any, role: str, input_format, param: str) -> Part:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in ("input_text", "text", "output_text"):
        text = part.get("text")
        if not isinstance(text, str):
            raise ProtocolError(f"'{param}.text' must be a string.", param=f"{param}.text")
        return Part(type="output_text" if role == "assistant" else "input_text", text=text)
    if kind in ("input_audio", "audio", "output_audio") and role == "user":
        samples = decode_audio_field(part.get("audio"), input_format, f"{param}.audio")
        return Part(type="input_audio", samples=resample(samples, input_format.rate, MODEL_INPUT_RATE))
    if kind in ("audio", "output_audio") and role == "assistant":
        transcript = part.get("transcript")
        if not isinstance(transcript, str):
            raise ProtocolError(f"'{param}.transcript' must be a string.", param=f"{param}.transcript")
        return Part(type="output_audio", transcript=transcript)
    raise ProtocolError(f"Unsupported content part type {kind!r} for a {role} message.", param=f"{param}.type")


def decode_base64(value: Any, param: str) -> bytes:
    if not isinstance(value, str):
        raise ProtocolError(f"'{param}' must be a base64 string.", param=param, code="invalid_value")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError(f"Invalid '{param}': not valid base64.", param=param, code="invalid_base64") from None


def decode_audio_field(value: Any, input_format, param: str) -> np.ndarray:
    from control_plane.realtime.audio_formats import FormatError

    try:
        return input_format.decode(decode_base64(value, param))
    except FormatError as error:
        raise ProtocolError(f"Invalid '{param}': {error}", param=param, code="invalid_audio") from None
