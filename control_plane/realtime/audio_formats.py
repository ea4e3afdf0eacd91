"""The three audio formats of the protocol, in their GA and beta spellings.

    GA {"type": "audio/pcm", "rate": 24000}  beta "pcm16"      16-bit little-endian PCM, 24 kHz mono
    GA {"type": "audio/pcmu"}                beta "g711_ulaw"  G.711 µ-law, 8 kHz mono
    GA {"type": "audio/pcma"}                beta "g711_alaw"  G.711 A-law, 8 kHz mono

Client bytes become float32 samples in [-1, 1] at the format's rate, and back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from control_plane.realtime import g711


class FormatError(ValueError):
    pass


@dataclass(frozen=True)
class AudioFormat:
    type: str
    rate: int
    beta_name: str
    bytes_per_sample: int

    def ga(self) -> dict:
        return {"type": self.type, "rate": self.rate} if self.type == "audio/pcm" else {"type": self.type}

    def decode(self, data: bytes) -> np.ndarray:
        if self.type == "audio/pcm":
            if len(data) % 2:
                raise FormatError("audio/pcm data must hold whole 16-bit samples (an even number of bytes)")
            pcm = np.frombuffer(data, dtype="<i2")
        else:
            pcm = g711.decode(data, "ulaw" if self.type == "audio/pcmu" else "alaw")
        return pcm.astype(np.float32) / 32768.0

    def encode(self, samples: np.ndarray) -> bytes:
        pcm = np.clip(np.round(np.asarray(samples, dtype=np.float32) * 32767.0), -32768, 32767).astype(np.int16)
        if self.type == "audio/pcm":
            return pcm.astype("<i2").tobytes()
        return g711.encode(pcm, "ulaw" if self.type == "audio/pcmu" else "alaw")

    def seconds(self, nbytes: int) -> float:
        return nbytes / self.bytes_per_sample / self.rate


PCM = AudioFormat("audio/pcm", 24000, "pcm16", 2)
PCMU = AudioFormat("audio/pcmu", 8000, "g711_ulaw", 1)
PCMA = AudioFormat("audio/pcma", 8000, "g711_alaw", 1)
FORMATS = {fmt.type: fmt for fmt in (PCM, PCMU, PCMA)}
BETA_FORMATS = {fmt.beta_name: fmt for fmt in (PCM, PCMU, PCMA)}


def parse_format(value, field: str) -> AudioFormat:
    """A GA format object or a beta format name; FormatError names what is wrong."""
    if isinstance(value, str):
        if value in BETA_FORMATS:
            return BETA_FORMATS[value]
        if value in FORMATS:
            return FORMATS[value]
        raise FormatError(f"Invalid '{field}': {value!r}; expected one of {sorted(BETA_FORMATS)}.")
    if not isinstance(value, dict) or value.get("type") not in FORMATS:
        raise FormatError(f"Invalid '{field}.type': expected one of {sorted(FORMATS)}.")
    fmt = FORMATS[value["type"]]
    rate = value.get("rate", fmt.rate)
    if rate != fmt.rate:
        raise FormatError(f"Invalid '{field}.rate': {value['type']} is {fmt.rate} Hz only, got {rate!r}.")
    return fmt
