"""Input processing for the Qwen-Omni thinker: chat messages with text, audio, image and video parts.

Runs on the thinker's host (`family.prepare_request`): the checkpoint's own chat template
and processor expand the audio/image/video placeholders; the processed features travel to the
engine as payloads. Content parts:

- `{"type": "text", "text": ...}`
- `{"type": "audio", "audio": <base64 WAV/FLAC, data URL, or a list of float samples>,
   "sampling_rate": 16000}` (resampled to the feature extractor's rate)
- `{"type": "image", "image": <base64 PNG/JPEG or data URL>}` (also `image_url: {"url": ...}`)
- `{"type": "video", "video": <base64 MP4/WebM/... or data URL>}` (also `video_url: {"url": ...}`):
  decoded and sampled by stages/models/omni_video_decode.py within the thinker's `VideoLimits`,
  patchified by the torchvision-free stand-in of stages/models/omni_video_processor.py. The
  video's own audio track is not used (`use_audio_in_video` is refused).

Bad input raises InvalidRequest naming the field.
"""

from __future__ import annotations

import base64
import binascii
import io
from typing import Any, NamedTuple

import msgspec

from stages.errors import InvalidRequest
from stages.models.omni_video_limits import VideoLimits
from stages.protocol import StageRequest

AUDIO_RATE = 16000
OMNI_INPUTS = ("text", "audio", "image", "video")
"""What the thinker takes from a request (its `StageConfig.inputs`)."""


class ChatParts(NamedTuple):
    conversation: list[dict[str, Any]]
    """The messages for the chat template, media parts reduced to their type."""
    audios: list[Any]
    images: list[Any]
    videos: list[tuple[bytes, str]]
    """Each video file's bytes and the field it came from (decoded later, within the limits)."""


def prepare_omni_request(request: StageRequest, processor, video_limits: VideoLimits) -> StageRequest:
    """The thinker's input from messages or a prompt. The voice is not its concern: the API checks it
    against the voices the family publishes, and the talker and code2wav read its conditioning."""
    from stages.models.omni_thinker import MM_PAYLOADS
    from stages.tensors import to_wire

    if request.prompt_token_ids and not request.messages and not request.prompt:
        return request
    messages = request.messages
    if messages is None:
        if not request.prompt:
            raise InvalidRequest("messages", "send messages, a prompt or prompt_token_ids")
        if request.options.raw_prompt:  # /v1/completions: the prompt as written, no template
            token_ids = processor.tokenizer(request.prompt, add_special_tokens=False)["input_ids"]
            return msgspec.structs.replace(request, prompt=None, prompt_token_ids=token_ids)
        messages = [{"role": "user", "content": request.prompt}]
    parts = split_messages(messages)
    if parts.videos and request.options.extra.get("use_audio_in_video"):
        raise InvalidRequest("use_audio_in_video", "a video's own audio track is not used; send it as an audio part")
    videos = sample_videos(parts.videos, processor.video_processor, video_limits)
    text = processor.tokenizer.apply_chat_template(parts.conversation, add_generation_prompt=True, tokenize=False)
    processed = processor(
        text=text,
        audio=parts.audios or None,
        images=parts.images or None,
        videos=[video.frames for video in videos] or None,
        return_tensors="pt",
        **audio_kwargs(parts.audios, processor.feature_extractor),
    )
    if videos:
        processed["video_second_per_grid"] = seconds_per_grid(videos, processor.video_processor.temporal_patch_size)
    payloads = {key: to_wire(processed[key]) for key in MM_PAYLOADS if key in processed}
    return msgspec.structs.replace(
        request,
        messages=None,
        prompt=None,
        prompt_token_ids=processed["input_ids"][0].tolist(),
        payloads={**request.payloads, **payloads},
    )


def audio_kwargs(audios: list[Any], feature_extractor) -> dict[str, Any]:
    return {"audio_kwargs": {"max_length": audio_padding(audios, feature_extractor)}} if audios else {}


def audio_padding(audios: list[Any], feature_extractor) -> int:
    """Samples to pad every clip of a request to: the longest clip plus one FFT window of silence
    (so that each clip's last frames see the same zeros they would see in any longer padding),
    in whole hops, at most the extractor's own maximum.

    Qwen2.5-Omni's processor pads each clip to the extractor's `n_samples` unless told otherwise:
    300 s for its checkpoints, 30,000 frames of 128 mels per clip however short it is. A realtime
    conversation sends all of its turns' audio with every response, so each turn's preparation
    then computed and carried five minutes of features per earlier turn (about 1 s of CPU and
    15 MB each). The valid frames, the only ones the audio tower reads, do not depend on the
    padding beyond the window."""
    hop = feature_extractor.hop_length
    longest = max(len(samples) for samples in audios) + feature_extractor.n_fft
    return min(feature_extractor.n_samples, -(-longest // hop) * hop)


def sample_videos(videos: list[tuple[bytes, str]], video_processor, limits: VideoLimits):
    from stages.models.omni_video_decode import decode_video

    factor, temporal = video_processor.factor, video_processor.temporal_patch_size
    return [decode_video(data, field, limits, factor=factor, temporal=temporal) for data, field in videos]


def seconds_per_grid(videos, temporal_patch_size: int):
    """Seconds one temporal patch spans, per video. The omni processors derive it from a single
    `fps` for all videos (Qwen3-Omni's defaulting to 1); each sampled video knows its own."""
    import torch

    return torch.tensor([temporal_patch_size / video.fps for video in videos])


def split_messages(messages: list[dict[str, Any]]) -> ChatParts:
    """The conversation for the chat template, the decoded audios and images and the video files, in order."""
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages", "must be a non-empty list")
    conversation, audios, images, videos = [], [], [], []
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
                videos.append(video_bytes(part, field))
                parts.append({"type": "video"})
            else:
                raise InvalidRequest(
                    f"{field}.type", f"unsupported content part type {kind!r} (text, audio, image, video)"
                )
        conversation.append({"role": message["role"], "content": parts})
    return ChatParts(conversation, audios, images, videos)


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

    value, name = _media_value(part, "image", field)
    if not isinstance(value, (str, bytes)):
        raise InvalidRequest(name, "expected base64 image data or a data URL")
    try:
        image = Image.open(io.BytesIO(_base64_bytes(value, name)))
        image.load()
    except (UnidentifiedImageError, OSError) as error:
        raise InvalidRequest(name, f"could not decode the image data: {error}") from None
    return image.convert("RGB")


def video_bytes(part: dict[str, Any], field: str) -> tuple[bytes, str]:
    value, name = _media_value(part, "video", field)
    if not isinstance(value, (str, bytes)):
        raise InvalidRequest(name, "expected base64 video data or a data URL")
    return _base64_bytes(value, name), name


def _media_value(part: dict[str, Any], kind: str, field: str) -> tuple[Any, str]:
    """`part[kind]`, or `part[kind + "_url"]["url"]` (or a bare string there), and its field name."""
    if part.get(kind) is not None:
        return part[kind], f"{field}.{kind}"
    url = part.get(f"{kind}_url")
    if isinstance(url, dict):
        return url.get("url"), f"{field}.{kind}_url.url"
    return url, f"{field}.{kind}_url"


def _base64_bytes(value: str | bytes, field: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if value.startswith("data:"):
        value = value.partition(",")[2]
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(field, "is not valid base64 data") from None
