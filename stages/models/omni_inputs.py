"""Input processing for the Qwen-Omni thinker: chat messages with text, audio and image parts.

Runs on the thinker's host (`family.prepare_request`): the checkpoint's own chat template
and processor expand the audio/image placeholders; the processed features travel to the
engine as payloads. Content parts:

- `{"type": "text", "text": ...}`
- `{"type": "audio", "audio": <base64 WAV/FLAC, data URL, or a list of float samples>,
   "sampling_rate": 16000}` (resampled to the feature extractor's rate)
- `{"type": "image", "image": <base64 PNG/JPEG or data URL>}` (also `image_url: {"url": ...}`)

Video parts are refused: the omni processors need torchvision for video, which is not
installed here. Bad input raises InvalidRequest naming the field.
"""

from __future__ import annotations

import base64
import binascii
import io
from typing import Any

import msgspec

from stages.errors import InvalidRequest
from stages.protocol import StageRequest

AUDIO_RATE = 16000


def prepare_omni_request(request: StageRequest, processor, speakers: list[str]) -> StageRequest:
    from stages.models.omni_thinker import MM_PAYLOADS
    from stages.tensors import to_wire

    check_voice(request.params.get("voice"), speakers)
    if request.prompt_token_ids and not request.messages and not request.prompt:
        return request
    messages = request.messages
    if messages is None:
        if not request.prompt:
            raise InvalidRequest("messages", "send messages, a prompt or prompt_token_ids")
        messages = [{"role": "user", "content": request.prompt}]
    conversation, audios, images = split_messages(messages)
    text = processor.tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    processed = processor(
        text=text,
        audio=audios or None,
        images=images or None,
        return_tensors="pt",
    )
    payloads = {key: to_wire(processed[key]) for key in MM_PAYLOADS if key in processed}
    return msgspec.structs.replace(
        request,
        messages=None,
        prompt=None,
        prompt_token_ids=processed["input_ids"][0].tolist(),
        payloads={**request.payloads, **payloads},
    )


def check_voice(voice: Any, speakers: list[str]) -> None:
    if voice is None:
        return
    if not isinstance(voice, str) or voice.lower() not in {name.lower() for name in speakers}:
        raise InvalidRequest("voice", f"unknown voice {voice!r}; this model has {sorted(speakers)}")


def split_messages(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Any], list[Any]]:
    """The conversation for the chat template, and the decoded audios and images in order."""
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages", "must be a non-empty list")
    conversation, audios, images = [], [], []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message or "content" not in message:
            raise InvalidRequest(f"messages[{index}]", "each message needs a 'role' and a 'content'")
        content = message["content"]
        if isinstance(content, str):
            conversation.append({"role": message["role"], "content": content})
            continue
        if not isinstance(content, list):
            raise InvalidRequest(f"messages[{index}].content", "must be a string or a list of parts")
        parts = []
        for part_index, part in enumerate(content):
            field = f"messages[{index}].content[{part_index}]"
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                parts.append({"type": "text", "text": str(part.get("text", ""))})
            elif kind in ("audio", "input_audio"):
                audios.append(decode_audio(part, field))
                parts.append({"type": "audio"})
            elif kind in ("image", "image_url"):
                images.append(decode_image(part, field))
                parts.append({"type": "image"})
            elif kind in ("video", "video_url"):
                raise InvalidRequest(f"{field}.type", "video input is not supported here (needs torchvision)")
            else:
                raise InvalidRequest(f"{field}.type", f"unsupported content part type {kind!r} (text, audio, image)")
        conversation.append({"role": message["role"], "content": parts})
    return conversation, audios, images


def decode_audio(part: dict[str, Any], field: str):
    import numpy as np

    value = part.get("audio", part.get("input_audio"))
    if isinstance(value, dict):
        value = value.get("data")
    rate = int(part.get("sampling_rate", AUDIO_RATE))
    if isinstance(value, list):
        try:
            samples = np.asarray(value, dtype=np.float32)
        except (TypeError, ValueError):
            raise InvalidRequest(f"{field}.audio", "sample lists must hold numbers") from None
    elif isinstance(value, (str, bytes)):
        samples, rate = _decode_audio_file(_base64_bytes(value, f"{field}.audio"), f"{field}.audio")
    else:
        raise InvalidRequest(f"{field}.audio", "expected base64 audio data or a list of samples")
    if samples.ndim == 2:
        samples = samples.mean(axis=1)
    if samples.size == 0 or not np.isfinite(samples).all():
        raise InvalidRequest(f"{field}.audio", "audio is empty or not finite")
    return _resample(samples, rate)


def _decode_audio_file(data: bytes, field: str):
    import numpy as np
    import soundfile

    try:
        samples, rate = soundfile.read(io.BytesIO(data), dtype="float32")
    except Exception as error:
        raise InvalidRequest(field, f"could not decode the audio data: {error}") from None
    return np.asarray(samples, dtype=np.float32), int(rate)


def _resample(samples, rate: int):
    import numpy as np

    if rate == AUDIO_RATE:
        return samples
    duration = samples.shape[0] / rate
    target = np.linspace(0, samples.shape[0] - 1, max(1, int(round(duration * AUDIO_RATE))))
    return np.interp(target, np.arange(samples.shape[0]), samples).astype(np.float32)


def decode_image(part: dict[str, Any], field: str):
    from PIL import Image, UnidentifiedImageError

    value = part.get("image")
    name = f"{field}.image"
    if value is None and isinstance(part.get("image_url"), dict):
        value, name = part["image_url"].get("url"), f"{field}.image_url.url"
    if not isinstance(value, (str, bytes)):
        raise InvalidRequest(name, "expected base64 image data or a data URL")
    try:
        image = Image.open(io.BytesIO(_base64_bytes(value, name)))
        image.load()
    except (UnidentifiedImageError, OSError) as error:
        raise InvalidRequest(name, f"could not decode the image data: {error}") from None
    return image.convert("RGB")


def _base64_bytes(value: str | bytes, field: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if value.startswith("data:"):
        value = value.partition(",")[2]
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(field, "is not valid base64 data") from None
