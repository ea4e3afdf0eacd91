"""A session in G.711 A-law both ways (`audio/pcma`, 8 kHz): spoken A-law in, turns found by
the server VAD at 8 kHz, and audio deltas that decode as A-law at 8 kHz to the echo voice's
tones, sample for sample within A-law's quantisation."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from asgiref.sync import sync_to_async
from realtime_helpers import events_until, recorded_audio, send, silence, wav_duration
from websockets.asyncio.client import connect

from control_plane.realtime.audio_formats import PCMA, PCMU
from stages.resampling import resample

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ALAW = {"type": "audio/pcma"}
RATE = 8000
SAMPLES_PER_PIECE_8K = 80  # the echo voice's 10 ms tone per word piece


def alaw_chunks(samples_24k: np.ndarray, ms: int = 100):
    alaw = PCMA.encode(resample(samples_24k, 24000, RATE))
    step = RATE * ms // 1000  # one byte a sample
    for start in range(0, len(alaw), step):
        yield base64.b64encode(alaw[start : start + step]).decode()


def echo_voice(pieces: int) -> np.ndarray:
    """What the echo voice says for `pieces` word pieces (a 10 ms 440 Hz tone each, at 16 kHz),
    at 8 kHz."""
    piece = 0.1 * np.sin(2 * np.pi * 440.0 * np.arange(160) / 16000)
    return resample(np.tile(piece, pieces).astype(np.float32), 16000, RATE)


async def test_alaw_in_and_out_end_to_end(voice_stack, spoken_hello):
    headers = {"Authorization": f"Bearer {voice_stack.user_secret}"}
    async with connect(voice_stack.ws_url("echo-voice"), additional_headers=headers) as ws:
        await events_until(ws, "rate_limits.updated")
        await send(ws, "session.update", session={"audio": {"input": {"format": ALAW}, "output": {"format": ALAW}}})
        session = (await events_until(ws, "session.updated"))[-1]["session"]
        assert session["audio"]["input"]["format"] == ALAW and session["audio"]["output"]["format"] == ALAW
        assert session["omnistage"]["input_rate"] == RATE and session["omnistage"]["output_rate"] == RATE

        for chunk in alaw_chunks(np.concatenate([silence(0.3), spoken_hello, silence(1.0)])):
            await send(ws, "input_audio_buffer.append", audio=chunk)
        events = await events_until(ws, "response.done")
        await events_until(ws, "rate_limits.updated")  # the response is in the history
        types = [e["type"] for e in events]
        assert types.index("input_audio_buffer.speech_started") < types.index("input_audio_buffer.speech_stopped")
        done = events[-1]["response"]
        assert done["status"] == "completed" and done["audio"]["output"]["format"] == ALAW
        committed = next(e for e in events if e["type"] == "input_audio_buffer.committed")

        audio = b"".join(base64.b64decode(e["delta"]) for e in events if e["type"] == "response.output_audio.delta")
        transcript = done["output"][0]["content"][0]["transcript"]
        pieces = len(transcript.split())
        assert abs(len(audio) - pieces * SAMPLES_PER_PIECE_8K) <= 4  # one byte a sample at 8 kHz
        answer, expected = PCMA.decode(audio), echo_voice(pieces)
        assert np.max(np.abs(answer - expected[: answer.size])) < 0.01  # A-law's quantisation error near 0.1
        assert np.max(np.abs(PCMU.decode(audio) - expected[: answer.size])) > 0.1  # read as µ-law it is not

        await send(ws, "conversation.item.retrieve", item_id=committed["item_id"])
        retrieved = (await events_until(ws, "conversation.item.retrieved"))[-1]["item"]
        user_item_alaw = base64.b64decode(retrieved["content"][0]["audio"])

    await sync_to_async(voice_stack.history_written)()
    recorded = await sync_to_async(recorded_audio)(done["id"], "in")
    spoken_s = spoken_hello.size / 24000
    assert spoken_s - 0.1 < wav_duration(recorded) < spoken_s + 0.6  # the turn, with its prefix padding
    assert abs(len(user_item_alaw) / RATE - wav_duration(recorded)) < 0.01  # the item, handed back in A-law at 8 kHz
