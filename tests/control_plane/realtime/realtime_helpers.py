"""Helpers of the realtime tests: audio as the protocol carries it, and reading events."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import wave

import numpy as np
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed


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


def recorded_audio(response_id: str, direction: str) -> bytes:
    """The WAV a response's history row holds for its audio `direction` ("in" or "out")."""
    from control_plane.inference.models import InferenceRequest

    row = InferenceRequest.objects.get(request_id=response_id)
    (artifact,) = [a for a in row.artifacts.all() if a.meta["direction"] == direction]
    return artifact.file.read()


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


async def response_recorded(ws, timeout: float = 600.0) -> dict:
    """The response of the next response.done, once it is in the history (the server says
    rate_limits.updated after recording it)."""
    done = (await events_until(ws, "response.done", timeout))[-1]["response"]
    await events_until(ws, "rate_limits.updated", timeout)
    return done


async def send(ws, event_type: str, **fields) -> None:
    await ws.send(json.dumps({"type": event_type, **fields}))


async def refusal(url: str, **kwargs) -> tuple[dict, int]:
    """The one event a refused handshake gets, and the close code that follows it."""
    async with connect(url, **kwargs) as ws:
        event = await next_event(ws)
        try:
            extra = await asyncio.wait_for(ws.recv(), 10)
        except ConnectionClosed as closed:
            return event, closed.rcvd.code
        raise AssertionError(f"the refused socket stayed open and sent {extra}")
