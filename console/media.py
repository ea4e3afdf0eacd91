"""Media bytes from the wire: PCM chunks for the browser, a WAV file for the history."""

from __future__ import annotations

import base64
import io
import wave

import numpy as np

from control_plane.openai_compat.payloads import audio_samples
from stages.protocol import Tensor


def pcm_float32(tensor: Tensor) -> bytes:
    """A mono audio payload as little-endian float32 samples (what the browser's Web Audio plays)."""
    return audio_samples(tensor).astype("<f4", copy=False).reshape(-1).tobytes()


def wav_bytes(pcm: bytes, sample_rate: int) -> bytes:
    samples = np.frombuffer(pcm, dtype="<f4")
    pcm16 = (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(sample_rate)
        out.writeframes(pcm16.tobytes())
    return buffer.getvalue()


def data_url(data: bytes, mime_type: str) -> str:
    return f"data:{mime_type};base64,{base64.b64encode(data).decode()}"
