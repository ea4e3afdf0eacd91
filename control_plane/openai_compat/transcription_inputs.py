"""The multipart body of /v1/audio/transcriptions and /v1/audio/translations, checked: the
uploaded `file` decoded once here (a file that is not audio is a 400 naming `file`), the form
fields typed, and the instruction the model answers turned into one chat message.

A transcription asks the model for the words as spoken (in `language` when given); a
translation asks for them in English. `prompt` goes along as context (names, spelling).
"""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from control_plane.inference.errors import ApiError
from control_plane.openai_compat.bodies import convert, read_form
from control_plane.openai_compat.chat_inputs import max_media_bytes

RESPONSE_FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
STREAMED_FORMATS = ("json", "text")
GRANULARITIES = ("segment",)
MAX_PROMPT_CHARS = 4096
TRANSCRIBE = "Transcribe the speech in this audio word for word. Answer with the transcript only."
TRANSLATE = "Translate the speech in this audio into English. Answer with the English translation only."


class TranscriptionRequest(msgspec.Struct, kw_only=True):
    model: str
    language: str | None = None
    prompt: str | None = None
    response_format: str = "json"
    temperature: float | None = None
    stream: bool | None = None
    timestamp_granularities: list[str] | None = None
    max_tokens: int | None = None
    seed: int | None = None


@dataclass(frozen=True)
class UploadedAudio:
    data: bytes
    format: str
    samples: np.ndarray
    sample_rate: int
    filename: str

    @property
    def duration_s(self) -> float:
        return self.samples.shape[0] / self.sample_rate

    def summary(self) -> dict[str, Any]:
        """The file for the history row, without its bytes."""
        return {"filename": self.filename, "format": self.format, "bytes": len(self.data),
                "duration_s": round(self.duration_s, 3), "sample_rate": self.sample_rate}  # fmt: skip


def read_transcription_form(request) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """(form fields, uploaded files); `timestamp_granularities[]` gathered into a list."""
    fields, files = read_form(request)
    form: dict[str, Any] = {key: values[0] for key, values in fields.items() if values and not key.endswith("[]")}
    granularities = fields.get("timestamp_granularities[]") or fields.get("timestamp_granularities")
    if granularities:
        form["timestamp_granularities"] = granularities
    return form, files


def parse(form: dict[str, Any]) -> TranscriptionRequest:
    return convert(form, TranscriptionRequest, strict=False)


def validate(body: TranscriptionRequest, *, translation: bool) -> bool:
    """Whether the answer streams."""
    if body.response_format not in RESPONSE_FORMATS:
        raise ApiError.invalid(
            "response_format", f"Unsupported response_format {body.response_format!r}; use one of {RESPONSE_FORMATS}."
        )
    if body.temperature is not None and not (math.isfinite(body.temperature) and 0 <= body.temperature <= 1):
        raise ApiError.invalid("temperature", f"'temperature' must be between 0 and 1, got {body.temperature}.")
    if body.max_tokens is not None and body.max_tokens < 1:
        raise ApiError.invalid("max_tokens", f"'max_tokens' must be at least 1, got {body.max_tokens}.")
    if body.prompt is not None and len(body.prompt) > MAX_PROMPT_CHARS:
        raise ApiError.invalid("prompt", f"'prompt' is limited to {MAX_PROMPT_CHARS} characters.")
    if body.language is not None and not (0 < len(body.language.strip()) <= 32):
        raise ApiError.invalid("language", "'language' must name a language (ISO-639-1, e.g. 'en').")
    unsupported = [g for g in body.timestamp_granularities or [] if g not in GRANULARITIES]
    if unsupported:
        raise ApiError(400, f"Unsupported timestamp_granularities {unsupported}: only 'segment' is available.",
                       param="timestamp_granularities", code="unsupported_value")  # fmt: skip
    if body.timestamp_granularities and body.response_format != "verbose_json":
        raise ApiError.invalid("timestamp_granularities", "'timestamp_granularities' needs response_format "
                               "'verbose_json'.")  # fmt: skip
    stream = bool(body.stream)
    if stream and translation:
        raise ApiError.invalid("stream", "Translations are not streamed; leave 'stream' out.", "unsupported_value")
    if stream and body.response_format not in STREAMED_FORMATS:
        raise ApiError.invalid("response_format", f"A streamed transcription is sent as events; use response_format "
                               f"{' or '.join(STREAMED_FORMATS)} with 'stream'.")  # fmt: skip
    return stream


def read_audio(files: dict[str, list[Any]]) -> UploadedAudio:
    uploads = files.get("file", [])
    if not uploads:
        raise ApiError(400, "Missing required parameter: 'file' (an audio file).", param="file",
                       code="missing_required_parameter")  # fmt: skip
    if len(uploads) > 1:
        raise ApiError.invalid("file", f"Send one audio file, got {len(uploads)}.")
    upload = uploads[0]
    if upload.size > max_media_bytes():
        raise ApiError(413, f"'file' is larger than {max_media_bytes()} bytes.", param="file", code="media_too_large")
    data = upload.read()
    samples, rate, fmt = decode(data)
    return UploadedAudio(data=data, format=fmt, samples=samples, sample_rate=rate, filename=upload.name or "audio")


def decode(data: bytes) -> tuple[np.ndarray, int, str]:
    """(mono float32 samples, sample rate, container format) of an audio file."""
    import soundfile

    try:
        with soundfile.SoundFile(io.BytesIO(data)) as sound:
            fmt = sound.format.lower()
            samples = sound.read(dtype="float32", always_2d=True).mean(axis=1)
            rate = int(sound.samplerate)
    except Exception as error:  # libsndfile raises its own error types
        raise ApiError(400, f"'file' could not be decoded as audio (wav, flac, ogg, mp3): {error}", param="file",
                       code="invalid_audio") from None  # fmt: skip
    if samples.size == 0 or not np.isfinite(samples).all():
        raise ApiError(400, "'file' holds no audio.", param="file", code="invalid_audio")
    return samples, rate, {"mpeg": "mp3"}.get(fmt, fmt)


def instruction(body: TranscriptionRequest, *, translation: bool) -> str:
    text = TRANSLATE if translation else TRANSCRIBE
    if body.language and not translation:
        text += f" The speech is in {body.language.strip()}; write it in that language."
    if body.prompt:
        text += f" Context (names, spelling, earlier speech): {body.prompt}"
    return text


def transcription_messages(audio: UploadedAudio, text: str) -> list[dict[str, Any]]:
    part = {
        "type": "input_audio",
        "input_audio": {"data": base64.b64encode(audio.data).decode(), "format": audio.format},
    }
    return [{"role": "user", "content": [part, {"type": "text", "text": text}]}]
