"""The server VAD's switches: with `create_response: false` a detected turn is committed but
answered only on response.create; with `interrupt_response: false` speech during a response
is detected and committed, and the response runs to its end."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from realtime_helpers import chunks_of, events_until, pcm16_b64, send, silence
from websockets.asyncio.client import connect

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SLOW_VOICE = {"stages": {"echo": {"options": {"delay_s": 0.15}}, "voice": {"options": {"delay_s": 0.15}}}}
LONG_TEXT = " ".join(f"word{i}" for i in range(60))  # 60 steps of 0.15 s: 9 s unless interrupted
SAMPLES_PER_PIECE_24K = 240  # the echo voice's 10 ms tone per word piece, at 24 kHz


def vad(**switches) -> dict:
    return {"type": "server_vad", "silence_duration_ms": 500, **switches}


async def open_session(stack, model: str, turn_detection: dict):
    ws = await connect(stack.ws_url(model), additional_headers={"Authorization": f"Bearer {stack.user_secret}"})
    await events_until(ws, "rate_limits.updated")
    await send(ws, "session.update", session={"audio": {"input": {"turn_detection": turn_detection}}})
    rendered = (await events_until(ws, "session.updated"))[-1]["session"]["audio"]["input"]["turn_detection"]
    assert {key: rendered[key] for key in turn_detection} == turn_detection
    return ws


async def speak(ws, speech: np.ndarray) -> None:
    for chunk in chunks_of(np.concatenate([silence(0.3), speech, silence(1.0)])):
        await send(ws, "input_audio_buffer.append", audio=pcm16_b64(chunk))


def audio_samples(events: list[dict]) -> int:
    return sum(len(base64.b64decode(e["delta"])) // 2 for e in events if e["type"] == "response.output_audio.delta")


async def test_create_response_false_waits_for_response_create(voice_stack, spoken_hello):
    ws = await open_session(voice_stack, "echo-voice", vad(create_response=False))
    async with ws:
        await speak(ws, spoken_hello)
        turn = await events_until(ws, "conversation.item.done")
        types = [e["type"] for e in turn]
        assert types.index("input_audio_buffer.speech_started") < types.index("input_audio_buffer.speech_stopped")
        committed = next(e for e in turn if e["type"] == "input_audio_buffer.committed")

        # a round trip after the commit: a response the server had started would be announced by now
        await send(ws, "conversation.item.retrieve", item_id=committed["item_id"])
        turn += await events_until(ws, "conversation.item.retrieved")
        assert not any(e["type"].startswith("response.") for e in turn), [e["type"] for e in turn]

        await send(ws, "response.create", event_id="answer-now")
        answered = await events_until(ws, "response.done")
        assert not any(e["type"] == "error" for e in answered), answered  # no automatic response was running
        assert [e["type"] for e in answered].count("response.created") == 1
        done = answered[-1]["response"]
        assert done["status"] == "completed"
        assert done["output"][0]["content"][0]["transcript"].startswith("[user audio")  # it answered the turn


async def test_interrupt_response_false_lets_the_response_finish(realtime_stack, spoken_hello):
    realtime_stack.deploy("slow-voice", "echo-voice", SLOW_VOICE)
    realtime_stack.wait_running("slow-voice")
    # create_response off as well, so that the turn's own answer waits for response.create below
    ws = await open_session(realtime_stack, "slow-voice", vad(interrupt_response=False, create_response=False))
    async with ws:
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": LONG_TEXT}]}
        await send(ws, "conversation.item.create", item=item)
        await events_until(ws, "conversation.item.done")
        await send(ws, "response.create")
        before = await events_until(ws, "response.output_audio.delta")
        response_id = next(e for e in before if e["type"] == "response.created")["response"]["id"]

        await speak(ws, spoken_hello)  # sent at once: the VAD sees the whole turn while the response runs
        during = await events_until(ws, "response.done", timeout=120)
        types = [e["type"] for e in during]
        assert "input_audio_buffer.speech_started" in types, types  # heard during the response
        done = during[-1]["response"]
        assert done["id"] == response_id and done["status"] == "completed", done["status_details"]
        assert done["output"][0]["content"][0]["transcript"] == LONG_TEXT
        assert abs(audio_samples(before + during) - 60 * SAMPLES_PER_PIECE_24K) <= 8  # every word's tone
        if "input_audio_buffer.committed" not in types:
            await events_until(ws, "input_audio_buffer.committed")

        # the turn spoken during the response is in the conversation: response.create answers it
        await send(ws, "response.create")
        answer = await events_until(ws, "response.done", timeout=120)
        assert answer[-1]["response"]["status"] == "completed"
        assert answer[-1]["response"]["output"][0]["content"][0]["transcript"].startswith("[user audio")
