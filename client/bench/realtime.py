"""Spoken turns over /v1/realtime (the OpenAI Realtime protocol on a WebSocket): speech streamed
at 1x real time in 100 ms appends, server VAD ends the turn, then silence until the answer is
done. `benchmarks/realtime.py` drives many-turn sessions with the same `Session`."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import sys
import tempfile
import time
import wave
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from client.bench.record import RequestRecord
from stages.resampling import resample

CHUNK_MS = 100
RATE = 24000  # the protocol's pcm16 rate, both ways
ANSWER_TIMEOUT_S = 300
SPOKEN_TEXT = "hello, how are you"


class SpeechError(ValueError):
    pass


def speech_samples(wav: str | None = None) -> np.ndarray:
    """The user's speech at 24 kHz, trimmed to its voiced samples (the end of speech is the end of
    the samples): the WAV `wav` names, else espeak-ng saying "hello, how are you", else (neither
    available) a 1.2 s voiced buzz, which server VAD hears as speech too."""
    if wav:
        return _voiced(*_read_wav(Path(wav)))  # a named WAV that is missing fails here
    if shutil.which("espeak-ng"):
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(scratch) / "speech.wav"
            subprocess.run(["espeak-ng", "-w", str(path), SPOKEN_TEXT], check=True, capture_output=True)
            return _voiced(*_read_wav(path))
    print("espeak-ng is not installed and no --speech-wav was given: speaking a 1.2 s buzz", file=sys.stderr)
    t = np.arange(int(1.2 * RATE)) / RATE
    return (0.3 * np.sign(np.sin(2 * np.pi * 140 * t))).astype(np.float32)


def _read_wav(path: Path) -> tuple[np.ndarray, int]:
    with wave.open(str(path), "rb") as reader:
        if reader.getsampwidth() != 2:
            raise SpeechError(f"{path}: expected 16-bit PCM, got {8 * reader.getsampwidth()}-bit samples")
        rate, channels = reader.getframerate(), reader.getnchannels()
        pcm = np.frombuffer(reader.readframes(reader.getnframes()), dtype="<i2").reshape(-1, channels)
    return pcm.mean(axis=1).astype(np.float32) / 32768.0, rate


def _voiced(samples: np.ndarray, rate: int) -> np.ndarray:
    samples = resample(samples, rate, RATE)
    voiced = np.flatnonzero(np.abs(samples) > 0.01)
    if voiced.size == 0:
        raise SpeechError("the speech WAV is silent")
    return samples[voiced[0] : voiced[-1] + 1]


def pcm16(samples: np.ndarray) -> str:
    return base64.b64encode((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()).decode()


def append_event(samples: np.ndarray) -> str:
    return json.dumps({"type": "input_audio_buffer.append", "audio": pcm16(samples)})


def websocket_url(base_url: str, model: str) -> str:
    base = base_url.rstrip("/")
    if base.startswith("http"):
        base = "ws" + base[4:]
    return f"{base}/v1/realtime?model={model}"


@dataclass
class Turn:
    """Client clock readings (perf_counter) of one turn."""

    end_of_speech: float | None = None  # the append carrying the turn's last speech sample was sent
    speech_stopped: float | None = None  # the server's input_audio_buffer.speech_stopped arrived
    created: float | None = None
    text_times: list[float] = field(default_factory=list)
    first_audio: float | None = None
    last_audio: float | None = None
    done: float | None = None
    audio_bytes: int = 0
    response_id: str | None = None
    usage: dict | None = None
    error: str | None = None  # the first error event or unfinished response of this turn
    answered: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def audio_seconds(self) -> float:
        return self.audio_bytes / 2 / RATE

    def record(self) -> RequestRecord:
        """The turn as a request measured from the server's speech_stopped."""
        record = RequestRecord(start=self.speech_stopped, end=self.done, request_id=self.response_id)
        for now in self.text_times:
            record.on_text(now)
        if self.first_audio is not None:
            record.first_audio, record.last_audio = self.first_audio, self.last_audio
            record.audio_seconds = self.audio_seconds
        details = (self.usage or {}).get("output_token_details") or {}
        record.text_tokens = details.get("text_tokens")
        record.audio_tokens = details.get("audio_tokens")
        record.prompt_tokens = (self.usage or {}).get("input_tokens")
        return record


class Session:
    """One realtime session: `configure()`, a reader task on `read()`, then `speak()` per turn.
    Protocol errors and responses that did not complete are collected in `errors` (and the
    first of a turn in its `error`, which ends the turn)."""

    def __init__(self, ws, silence_ms: int = 300, session: dict | None = None):
        self.ws = ws
        self.silence_ms = silence_ms
        self.session = session or {}
        self.turn = Turn()
        self.errors: list[str] = []

    async def configure(self) -> None:
        detection = {"type": "server_vad", "silence_duration_ms": self.silence_ms, "prefix_padding_ms": 200}
        session = {**self.session, "audio": {"input": {"turn_detection": detection}}}
        await self.ws.send(json.dumps({"type": "session.update", "session": session}))

    async def read(self) -> None:
        async for raw in self.ws:
            self.on_event(json.loads(raw), time.perf_counter())

    def on_event(self, event: dict, now: float) -> None:
        kind, turn = event["type"], self.turn
        if kind == "error":
            self._error(event["error"].get("message") or str(event["error"]))
        elif kind == "input_audio_buffer.speech_stopped":
            turn.speech_stopped = now
        elif kind == "response.created":
            turn.created = now
            turn.response_id = event["response"]["id"]
        elif kind in ("response.output_audio_transcript.delta", "response.output_text.delta"):
            turn.text_times.append(now)
        elif kind == "response.output_audio.delta":
            turn.first_audio = turn.first_audio or now
            turn.last_audio = now
            turn.audio_bytes += len(base64.b64decode(event["delta"]))
        elif kind == "response.done":
            turn.done = now
            response = event["response"]
            turn.usage = response.get("usage")
            if response["status"] != "completed":
                self._error(f"response {response['status']}: {response.get('status_details')}")
            turn.answered.set()

    def _error(self, message: str) -> None:
        self.errors.append(message)
        self.turn.error = self.turn.error or message

    async def speak(self, speech: np.ndarray, timeout_s: float = ANSWER_TIMEOUT_S) -> Turn:
        """One turn at 1x real time: the speech, then silence until the answer is done."""
        self.turn = turn = Turn()
        chunk = RATE * CHUNK_MS // 1000
        clock = time.perf_counter()
        for start in range(0, speech.size, chunk):
            await self.ws.send(append_event(speech[start : start + chunk]))
            turn.end_of_speech = time.perf_counter()  # the last one sent carries the turn's last sample
            clock += CHUNK_MS / 1000
            await asyncio.sleep(max(0.0, clock - time.perf_counter()))
        quiet = append_event(np.zeros(chunk, dtype=np.float32))
        deadline = time.perf_counter() + timeout_s
        while not turn.answered.is_set() and turn.error is None and time.perf_counter() < deadline:
            await self.ws.send(quiet)
            clock += CHUNK_MS / 1000
            await asyncio.sleep(max(0.0, clock - time.perf_counter()))
        return turn


def connect(base_url: str, api_key: str, model: str):
    """An async context manager around a connected realtime WebSocket."""
    from websockets.asyncio.client import connect as ws_connect

    headers = {"Authorization": f"Bearer {api_key}"}
    return ws_connect(websocket_url(base_url, model), additional_headers=headers, max_size=None)


async def spoken_turn(base_url: str, api_key: str, model: str, speech: np.ndarray, *, silence_ms: int,
                      session: dict, timeout_s: float) -> RequestRecord:  # fmt: skip
    """One session of one turn, measured from the server's speech_stopped."""
    async with connect(base_url, api_key, model) as ws:
        talk = Session(ws, silence_ms, session)
        await talk.configure()
        reading = asyncio.create_task(talk.read())
        try:
            turn = await talk.speak(speech, timeout_s)
        finally:
            reading.cancel()
    if turn.error is not None:
        return RequestRecord(request_id=turn.response_id).fail(turn.error)
    if turn.speech_stopped is None:
        return RequestRecord().fail("the server's VAD never heard the end of speech (no speech_stopped)")
    if turn.done is None:
        return RequestRecord(request_id=turn.response_id).fail(f"no response.done within {timeout_s:.0f} s")
    return turn.record()
