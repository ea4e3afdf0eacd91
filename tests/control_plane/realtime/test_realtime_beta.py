"""A client that speaks only the beta dialect (flat session fields, `pcm16`, beta content
part names, `modalities`) gets the same session: GA events back, same turn sequence."""

from __future__ import annotations

import numpy as np
import pytest
from realtime_helpers import chunks_of, events_until, next_event, pcm16_b64, send, silence
from websockets.asyncio.client import connect

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BETA_SESSION = {
    "modalities": ["text", "audio"],
    "instructions": "Answer briefly.",
    "voice": "alloy",
    "input_audio_format": "pcm16",
    "output_audio_format": "pcm16",
    "input_audio_transcription": {"model": "whisper-1"},
    "turn_detection": {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 400},
    "temperature": 0.8,
    "max_response_output_tokens": "inf",
}


async def test_beta_client_gets_the_same_session(voice_stack, spoken_hello):
    headers = {"Authorization": f"Bearer {voice_stack.user_secret}", "OpenAI-Beta": "realtime=v1"}
    async with connect(voice_stack.ws_url("echo-voice"), additional_headers=headers) as ws:
        await events_until(ws, "rate_limits.updated")
        await send(ws, "session.update", session=BETA_SESSION)
        updated = await next_event(ws)
        assert updated["type"] == "session.updated"
        session = updated["session"]
        assert session["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
        assert session["audio"]["input"]["turn_detection"]["silence_duration_ms"] == 400
        assert session["audio"]["output"]["voice"] == "alloy"
        assert session["output_modalities"] == ["audio"]
        assert session["audio"]["input"]["transcription"] is None  # no transcription model here: not in effect

        # a text item with beta part names, a text-only response
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "good morning to you"}]}
        await send(ws, "conversation.item.create", item=item)
        assert [e["type"] for e in await events_until(ws, "conversation.item.done")] == [
            "conversation.item.added",
            "conversation.item.done",
        ]
        await send(ws, "response.create", response={"modalities": ["text"]})
        events = await events_until(ws, "response.done")
        text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        assert text == "good morning to you"
        assert not any(e["type"].startswith("response.output_audio") for e in events)
        assert events[-1]["response"]["output_modalities"] == ["text"]
        await events_until(ws, "rate_limits.updated")

        # a spoken turn: same sequence of GA events as the SDK sees
        for chunk in chunks_of(np.concatenate([silence(0.3), spoken_hello, silence(1.0)])):
            await send(ws, "input_audio_buffer.append", audio=pcm16_b64(chunk))
        events = await events_until(ws, "response.done")
        types = [e["type"] for e in events]
        for earlier, later in [
            ("input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped"),
            ("input_audio_buffer.speech_stopped", "input_audio_buffer.committed"),
            ("input_audio_buffer.committed", "response.created"),
            ("response.created", "response.output_audio_transcript.delta"),
            ("response.output_audio_transcript.delta", "response.output_audio.delta"),
            ("response.output_audio.delta", "response.output_audio.done"),
        ]:
            assert types.index(earlier) < types.index(later), types
        assert all(e.get("event_id") for e in events)
        done = events[-1]["response"]
        assert done["status"] == "completed" and done["usage"]["total_tokens"] > 0
