"""G.711 µ-law and A-law, as lookup tables built from the ITU reference algorithms.

Encoding maps every 16-bit PCM value to its byte through a 65536-entry table; decoding
maps every byte to its 16-bit value through a 256-entry table. Tables are built once.
"""

from __future__ import annotations

import functools

import numpy as np

_ULAW_BIAS = 0x84
_ULAW_CLIP = 8159
_ULAW_SEGMENT_ENDS = (0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF)
_ALAW_SEGMENT_ENDS = (0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF)


def _ulaw_encode_one(sample: int) -> int:
    value = sample >> 2  # 14-bit, as the reference (Sun's g711.c, CPython's audioop)
    mask = 0x7F if value < 0 else 0xFF
    value = min(-value if value < 0 else value, _ULAW_CLIP) + (_ULAW_BIAS >> 2)
    segment = next((i for i, end in enumerate(_ULAW_SEGMENT_ENDS) if value <= end), 8)
    if segment >= 8:
        return 0x7F ^ mask
    return ((segment << 4) | ((value >> (segment + 1)) & 0x0F)) ^ mask


def _ulaw_decode_one(byte: int) -> int:
    byte = ~byte & 0xFF
    exponent = (byte >> 4) & 0x07
    magnitude = (((byte & 0x0F) << 3) + _ULAW_BIAS) << exponent
    magnitude -= _ULAW_BIAS
    return -magnitude if byte & 0x80 else magnitude


def _alaw_encode_one(sample: int) -> int:
    value = sample >> 3
    if value >= 0:
        mask = 0xD5
    else:
        mask = 0x55
        value = -value - 1
    segment = next((i for i, end in enumerate(_ALAW_SEGMENT_ENDS) if value <= end), 8)
    if segment >= 8:
        return 0x7F ^ mask
    code = segment << 4
    code |= (value >> 1) & 0x0F if segment < 2 else (value >> segment) & 0x0F
    return code ^ mask


def _alaw_decode_one(byte: int) -> int:
    byte ^= 0x55
    magnitude = (byte & 0x0F) << 4
    segment = (byte & 0x70) >> 4
    if segment == 0:
        magnitude += 8
    else:
        magnitude = (magnitude + 0x108) << (segment - 1)
    return magnitude if byte & 0x80 else -magnitude


@functools.cache
def _encode_table(law: str) -> np.ndarray:
    encode = _ulaw_encode_one if law == "ulaw" else _alaw_encode_one
    return np.array([encode(value) for value in range(-32768, 32768)], dtype=np.uint8)


@functools.cache
def _decode_table(law: str) -> np.ndarray:
    decode = _ulaw_decode_one if law == "ulaw" else _alaw_decode_one
    return np.array([decode(byte) for byte in range(256)], dtype=np.int16)


def encode(pcm: np.ndarray, law: str) -> bytes:
    """int16 samples -> G.711 bytes (`law`: "ulaw" or "alaw")."""
    return _encode_table(law)[pcm.astype(np.int32) + 32768].tobytes()


def decode(data: bytes, law: str) -> np.ndarray:
    """G.711 bytes -> int16 samples."""
    return _decode_table(law)[np.frombuffer(data, dtype=np.uint8)]
