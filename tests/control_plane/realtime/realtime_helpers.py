"""Helpers of the realtime tests: audio as the protocol carries it, and reading events."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import wave

import numpy as np


def pcm16_b64(samples: np.ndarray) -> str:
    pcm = np.clip(np.round(samples * 32767), -32768, 32767).astype("<i2")
    return base64.b64encode(pcm.tobytes()).decode()


def chunks_of(samples: np.ndarray, rate: int = 24000, ms: int = 100):
    step = rate * ms // 1000
    for start in range(0, samples.size, step):
        yield samples[start : start + step]


def silence(seconds: float, rate: int = 24000) -> np.ndarray:
    return np.zeros(int(rate * seconds), dtype=np.float32)


def wav_duration(data: bytes) -> float:
    with wave.open(io.BytesIO(data), "rb") as reader:
        return reader.getnframes() / reader.getframerate()


async def next_event(ws, timeout: float = 30.0) -> dict:
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


async def events_until(ws, last_type: str, timeout: float = 60.0) -> list[dict]:
    """Every event up to and including the first of type `last_type`."""
    events = []
    async with asyncio.timeout(timeout):
        while True:
            event = json.loads(await ws.recv())
            events.append(event)
            if event["type"] == last_type:
                return events


async def send(ws, event_type: str, **fields) -> None:
    await ws.send(json.dumps({"type": event_type, **fields}))
