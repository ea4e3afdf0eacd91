"""The official OpenAI SDK's realtime client against the live server: a spoken WAV in,
transcript and audio deltas out in order, response.done with usage; each response in the
history with its audio in and out; manual turns with G.711 µ-law both ways."""

from __future__ import annotations

import asyncio
import base64

import numpy as np
import pytest
from asgiref.sync import sync_to_async
from openai import AsyncOpenAI
from realtime_helpers import chunks_of, pcm16_b64, silence, wav_duration

from control_plane.inference.models import InferenceRequest
from control_plane.realtime.audio_formats import PCMU
from stages.resampling import resample

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RESPONSE_ORDER = [
    "input_audio_buffer.speech_started",
    "input_audio_buffer.speech_stopped",
    "input_audio_buffer.committed",
    "conversation.item.added",
    "response.created",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_audio_transcript.delta",
    "response.output_audio.delta",
    "response.output_audio.done",
    "response.output_audio_transcript.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.done",
]


def sdk_client(stack) -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key=stack.user_secret, base_url=f"{stack.base}/v1", websocket_base_url=f"{stack.ws_base}/v1", max_retries=0
    )


async def until(connection, event_type: str, seen: list, timeout: float = 60.0):
    async with asyncio.timeout(timeout):
        async for event in connection:
            seen.append(event)
            if event.type == event_type:
                return event
    raise AssertionError(f"the connection closed before {event_type}")


async def speak(connection, speech: np.ndarray) -> None:
    for chunk in chunks_of(np.concatenate([silence(0.3), speech, silence(1.0)])):
        await connection.input_audio_buffer.append(audio=pcm16_b64(chunk))


def check_turn(events: list) -> tuple[str, bytes]:
    types = [event.type for event in events]
    assert all(getattr(event, "event_id", None) for event in events)
    positions = [types.index(name) for name in RESPONSE_ORDER]
    assert positions == sorted(positions), types
    assert types.count("response.done") == 1
    transcript = "".join(e.delta for e in events if e.type == "response.output_audio_transcript.delta")
    done = next(e for e in events if e.type == "response.output_audio_transcript.done")
    assert transcript == done.transcript and transcript.startswith("[user audio")
    audio = b"".join(base64.b64decode(e.delta) for e in events if e.type == "response.output_audio.delta")
    response = events[-1].response
    assert response.status == "completed"
    assert response.usage.output_tokens > 0 and response.usage.total_tokens >= response.usage.output_tokens
    assert response.output[0].content[0].transcript == transcript
    return response.id, audio


async def test_sdk_voice_session_with_server_vad(voice_stack, spoken_hello):
    async with sdk_client(voice_stack).realtime.connect(model="echo-voice") as connection:
        seen: list = []
        created = await until(connection, "session.created", seen)
        assert created.session.audio.input.format.rate == 24000
        assert created.session.audio.input.turn_detection.type == "server_vad"
        await until(connection, "rate_limits.updated", seen)
        await connection.session.update(session={"type": "realtime", "instructions": "Be brief."})
        updated = await until(connection, "session.updated", seen)
        assert updated.session.instructions == "Be brief."

        turns = []
        for _ in range(2):
            await speak(connection, spoken_hello)
            events: list = []
            await until(connection, "response.done", events)
            response_id, audio = check_turn(events)
            turns.append((response_id, audio))
            await until(connection, "rate_limits.updated", [])

    await sync_to_async(voice_stack.history_written)()
    for response_id, audio in turns:
        # 4 word pieces answered by 10 ms tones at 16 kHz, resampled to 24 kHz 16-bit
        assert abs(len(audio) // 2 - 4 * 240) <= 4
        row = await sync_to_async(InferenceRequest.objects.get)(request_id=response_id)
        assert row.route == "realtime" and row.status == "completed"
        assert row.ttfp_s is not None and row.ttfp_s > 0
        assert row.usage["audio_in"]["seconds"] > 0.5
        artifacts = await sync_to_async(lambda row=row: {a.meta["direction"]: a for a in row.artifacts.all()})()
        assert set(artifacts) == {"in", "out"}
        heard = await sync_to_async(lambda a=artifacts["in"]: a.file.read())()
        spoken_s = spoken_hello.size / 24000
        assert spoken_s - 0.1 < wav_duration(heard) < spoken_s + 0.6  # the turn, with its prefix padding
    second = await sync_to_async(InferenceRequest.objects.get)(request_id=turns[1][0])
    assert [message["role"] for message in second.inputs["messages"]] == ["system", "user", "assistant", "user"]


async def test_sdk_manual_turns_in_g711_ulaw(voice_stack, spoken_hello):
    async with sdk_client(voice_stack).realtime.connect(model="echo-voice") as connection:
        seen: list = []
        await until(connection, "session.created", seen)
        await connection.session.update(
            session={
                "type": "realtime",
                "audio": {
                    "input": {"format": {"type": "audio/pcmu"}, "turn_detection": None},
                    "output": {"format": {"type": "audio/pcmu"}},
                },
            }
        )
        updated = await until(connection, "session.updated", seen)
        assert updated.session.audio.input.format.type == "audio/pcmu"
        assert updated.session.audio.output.format.type == "audio/pcmu"
        assert updated.session.audio.input.turn_detection is None

        ulaw = PCMU.encode(resample(spoken_hello, 24000, 8000))
        for start in range(0, len(ulaw), 800):
            await connection.input_audio_buffer.append(audio=base64.b64encode(ulaw[start : start + 800]).decode())
        await connection.input_audio_buffer.commit()
        committed = await until(connection, "input_audio_buffer.committed", seen)
        await connection.response.create()
        events: list = []
        done = await until(connection, "response.done", events)
        assert not any(e.type.startswith("input_audio_buffer.speech") for e in seen + events)
        assert done.response.status == "completed"
        audio = b"".join(base64.b64decode(e.delta) for e in events if e.type == "response.output_audio.delta")
        assert abs(len(audio) - 4 * 80) <= 4  # 8 kHz, one byte a sample
        tone = PCMU.decode(audio)
        assert 0.05 < np.sqrt(np.mean(tone[10:] ** 2)) < 0.1  # the echo stage's 0.1-amplitude tone

        await connection.conversation.item.retrieve(item_id=committed.item_id)
        retrieved = await until(connection, "conversation.item.retrieved", seen)
        assert abs(len(base64.b64decode(retrieved.item.content[0].audio)) - len(ulaw)) <= 8
