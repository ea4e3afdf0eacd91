"""Float32 mono samples to the audio containers OpenAI names: wav, pcm16 (raw little-endian
16-bit), flac, mp3, opus (Ogg), through soundfile/libsndfile. `pcm` is vLLM-Omni's alias
of pcm16; `aac` is not offered (libsndfile has no AAC encoder)."""

from __future__ import annotations

import io

import numpy as np

FORMATS = ("wav", "pcm16", "flac", "mp3", "opus")
ALIASES = {"pcm": "pcm16"}
MIME_TYPES = {
    "wav": "audio/wav",
    "pcm16": "audio/pcm",
    "flac": "audio/flac",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
}
EXTENSIONS = {"wav": "wav", "pcm16": "pcm", "flac": "flac", "mp3": "mp3", "opus": "opus"}
_OPUS_RATES = (8000, 12000, 16000, 24000, 48000)


def normalize_format(value: str) -> str | None:
    """The canonical format name, or None when it is not one we can encode."""
    name = ALIASES.get(value.lower(), value.lower()) if isinstance(value, str) else None
    return name if name in FORMATS else None


def pcm16_bytes(samples: np.ndarray) -> bytes:
    clipped = np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0)
    return (clipped * 32767.0).round().astype("<i2").tobytes()


def encode_audio(samples: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    """One complete file (or raw PCM stream for pcm16) of `samples` in `fmt`."""
    import soundfile

    samples = np.asarray(samples, dtype=np.float32).reshape(-1)
    if fmt == "pcm16":
        return pcm16_bytes(samples)
    if fmt == "wav":  # the same 16-bit samples as pcm16, so a stream and its file agree to the byte
        pcm = pcm16_bytes(samples)
        return wav_header(sample_rate, len(pcm)) + pcm
    buffer = io.BytesIO()
    if fmt == "flac":
        soundfile.write(buffer, samples, sample_rate, format="FLAC", subtype="PCM_16")
    elif fmt == "mp3":
        soundfile.write(buffer, samples, sample_rate, format="MP3")
    elif fmt == "opus":
        rate = min((r for r in _OPUS_RATES if r >= sample_rate), default=48000)
        soundfile.write(buffer, resample(samples, sample_rate, rate), rate, format="OGG", subtype="OPUS")
    else:
        raise ValueError(f"unknown audio format {fmt!r}")
    return buffer.getvalue()


def resample(samples: np.ndarray, rate: int, target: int) -> np.ndarray:
    """Linear-interpolation resampling (enough for container constraints, not for studio work)."""
    if rate == target or samples.size == 0:
        return samples
    count = max(1, round(samples.size * target / rate))
    positions = np.linspace(0, samples.size - 1, count)
    return np.interp(positions, np.arange(samples.size), samples).astype(np.float32)


def time_stretch(samples: np.ndarray, speed: float) -> np.ndarray:
    """Play `speed` times faster by resampling (changes pitch too; a vocoder-free approximation)."""
    if speed == 1.0 or samples.size == 0:
        return samples
    count = max(1, round(samples.size / speed))
    positions = np.linspace(0, samples.size - 1, count)
    return np.interp(positions, np.arange(samples.size), samples).astype(np.float32)


def wav_header(sample_rate: int, data_bytes: int = 0xFFFFFFFF - 36) -> bytes:
    """A 16-bit mono WAV header; the default sizes mark a stream of unknown length."""
    import struct

    riff_size = min(0xFFFFFFFF, 36 + data_bytes)
    return (
        b"RIFF" + struct.pack("<I", riff_size) + b"WAVE"
        + b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
        + b"data" + struct.pack("<I", min(0xFFFFFFFF, data_bytes))
    )  # fmt: skip
