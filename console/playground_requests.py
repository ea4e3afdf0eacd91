"""What a playground asks for, checked and turned into the platform's StageRequest.

Each mode (chat, image, speech, video) reads its own fields from the browser's message and
raises `PlaygroundInvalid(field, message)` for bad input, so the page can mark the field.
Sampling fields stay in `parameters`: they are merged over the stage's defaults once the
deployment is known (console/consumers/playground.py).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from stages.diffusion_knobs import DiffusionKnobs
from stages.protocol import RequestOptions, StageRequest

MODES = ("chat", "image", "speech", "video")
VOICES = ("", "Chelsie", "Ethan")
AUDIO_FORMATS = ("wav", "pcm16")
SPEECH_FORMATS = ("wav", "pcm16")
MAX_PROMPT_CHARS = 20000
MAX_ATTACHMENT_CHARS = 8_000_000


class PlaygroundInvalid(Exception):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass
class PlaygroundRequest:
    mode: str
    deployment: str
    request: StageRequest
    parameters: dict[str, Any]
    """The parameters as the user gave them (for the history and the code sample)."""
    inputs: dict[str, Any] = field(default_factory=dict)
    modalities: list[str] = field(default_factory=list)
    """The output modalities asked for (set once the deployment is known)."""


def new_request_id(mode: str) -> str:
    return f"console-{mode}-{uuid.uuid4().hex[:16]}"


def _text(data: dict, name: str, *, required: bool = True, limit: int = MAX_PROMPT_CHARS) -> str:
    value = data.get(name, "")
    if not isinstance(value, str):
        raise PlaygroundInvalid(name, "must be text")
    value = value.strip()
    if required and not value:
        raise PlaygroundInvalid(name, "is required")
    if len(value) > limit:
        raise PlaygroundInvalid(name, f"is longer than {limit} characters")
    return value


def _int(data: dict, name: str, default: int | None, low: int, high: int) -> int | None:
    value = data.get(name, default)
    if value in (None, ""):
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise PlaygroundInvalid(name, "must be a whole number") from None
    if not low <= number <= high:
        raise PlaygroundInvalid(name, f"must be between {low} and {high}")
    return number


def _float(data: dict, name: str, default: float, low: float, high: float) -> float:
    value = data.get(name, default)
    if value in (None, ""):
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PlaygroundInvalid(name, "must be a number") from None
    if not low <= number <= high:
        raise PlaygroundInvalid(name, f"must be between {low} and {high}")
    return number


def _choice(data: dict, name: str, choices: tuple[str, ...], default: str) -> str:
    value = data.get(name, default) or default
    if value not in choices:
        raise PlaygroundInvalid(name, f"must be one of {', '.join(c or '(default)' for c in choices)}")
    return value


def _size(data: dict) -> tuple[int, int]:
    size = _text(data, "size", required=False) or "64x64"
    width, _, height = size.partition("x")
    if not (width.isdigit() and height.isdigit()) or not (16 <= int(width) <= 2048 and 16 <= int(height) <= 2048):
        raise PlaygroundInvalid("size", "must look like 64x64 (16 to 2048 pixels a side)")
    return int(width), int(height)


def _attachment_part(attachment: Any, index: int) -> dict:
    name = f"attachments[{index}]"
    if not isinstance(attachment, dict) or attachment.get("kind") not in ("image", "audio"):
        raise PlaygroundInvalid(name, "an attachment is an image or an audio file")
    data = attachment.get("data")
    if not isinstance(data, str) or not data.startswith("data:") or ";base64," not in data:
        raise PlaygroundInvalid(name, "expected the file as a base64 data URL")
    if len(data) > MAX_ATTACHMENT_CHARS:
        raise PlaygroundInvalid(name, "the file is too large (6 MB at most)")
    if attachment["kind"] == "image":
        return {"type": "image_url", "image_url": {"url": data}}
    mime, _, encoded = data.removeprefix("data:").partition(";base64,")
    audio_format = mime.rpartition("/")[2].replace("x-", "").replace("wave", "wav").replace("mpeg", "mp3") or "wav"
    return {"type": "input_audio", "input_audio": {"data": encoded, "format": audio_format}}


def _chat(data: dict, request_id: str) -> tuple[StageRequest, dict, dict]:
    prompt = _text(data, "prompt")
    attachments = data.get("attachments") or []
    if not isinstance(attachments, list) or len(attachments) > 4:
        raise PlaygroundInvalid("attachments", "at most 4 attachments")
    history = data.get("history") or []
    if not isinstance(history, list) or not all(
        isinstance(m, dict) and m.get("role") in ("user", "assistant") and isinstance(m.get("content"), str)
        for m in history
    ):
        raise PlaygroundInvalid("history", "earlier turns must be {role, content} text messages")
    parts = [_attachment_part(attachment, i) for i, attachment in enumerate(attachments)]
    content: str | list = [{"type": "text", "text": prompt}, *parts] if parts else prompt
    messages = [
        *({"role": m["role"], "content": m["content"]} for m in history[-20:]),
        {"role": "user", "content": content},
    ]
    parameters = {
        "max_tokens": _int(data, "max_tokens", 64, 1, 4096),
        "temperature": _float(data, "temperature", 0.0, 0.0, 2.0),
        "voice": _choice(data, "voice", VOICES, ""),
        "audio_format": _choice(data, "audio_format", AUDIO_FORMATS, "wav"),
    }
    request = StageRequest(
        request_id=request_id,
        messages=messages,
        options=RequestOptions(voice=parameters["voice"] or None),
        params={"audio_format": parameters["audio_format"]},
        arrival_time=time.time(),
    )
    inputs = {"prompt": prompt, "messages": messages, "attachments": [a.get("kind") for a in attachments]}
    return request, parameters, inputs


def _image(data: dict, request_id: str) -> tuple[StageRequest, dict, dict]:
    prompt = _text(data, "prompt")
    width, height = _size(data)
    parameters = {
        "size": f"{width}x{height}",
        "num_inference_steps": _int(data, "num_inference_steps", 4, 1, 200),
        "seed": _int(data, "seed", None, 0, 2**63 - 1),
    }
    knobs = DiffusionKnobs(height=height, width=width, num_inference_steps=parameters["num_inference_steps"],
                           seed=parameters["seed"], output_format="png")  # fmt: skip
    request = StageRequest(request_id=request_id, prompt=prompt, options=RequestOptions(diffusion=knobs),
                           arrival_time=time.time())  # fmt: skip
    return request, parameters, {"prompt": prompt}


def _speech(data: dict, request_id: str) -> tuple[StageRequest, dict, dict]:
    text = _text(data, "input")
    parameters = {
        "voice": _choice(data, "voice", VOICES, ""),
        "response_format": _choice(data, "response_format", SPEECH_FORMATS, "wav"),
    }
    request = StageRequest(
        request_id=request_id,
        prompt=text,
        messages=[{"role": "user", "content": text}],
        options=RequestOptions(modalities=["audio"], voice=parameters["voice"] or None),
        arrival_time=time.time(),
    )
    return request, parameters, {"input": text}


def _video(data: dict, request_id: str) -> tuple[StageRequest, dict, dict]:
    prompt = _text(data, "prompt")
    width, height = _size(data)
    parameters = {
        "size": f"{width}x{height}",
        "num_frames": _int(data, "num_frames", None, 1, 257),  # none: the deployment's default
        "num_inference_steps": _int(data, "num_inference_steps", 4, 1, 200),
        "seed": _int(data, "seed", None, 0, 2**63 - 1),
    }
    knobs = DiffusionKnobs(height=height, width=width, num_inference_steps=parameters["num_inference_steps"],
                           num_frames=parameters["num_frames"], seed=parameters["seed"], output_format="mp4")  # fmt: skip
    request = StageRequest(request_id=request_id, prompt=prompt, options=RequestOptions(diffusion=knobs),
                           arrival_time=time.time())  # fmt: skip
    return request, parameters, {"prompt": prompt}


_BUILDERS = {"chat": _chat, "image": _image, "speech": _speech, "video": _video}


def playground_request(message: dict) -> PlaygroundRequest:
    """Check a browser `run` message and build the StageRequest it asks for."""
    mode = message.get("mode")
    if mode not in MODES:
        raise PlaygroundInvalid("mode", f"must be one of {', '.join(MODES)}")
    deployment = message.get("deployment")
    if not isinstance(deployment, str) or not deployment:
        raise PlaygroundInvalid("deployment", "choose a deployment")
    data = message.get("input")
    if not isinstance(data, dict):
        raise PlaygroundInvalid("input", "missing")
    request, parameters, inputs = _BUILDERS[mode](data, new_request_id(mode))
    return PlaygroundRequest(mode=mode, deployment=deployment, request=request, parameters=parameters, inputs=inputs)
