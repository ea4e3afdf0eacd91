"""Bad client events get an `error` event naming the offending event_id, and the session
keeps working: unknown type, malformed JSON and base64, wrong audio format, an oversized
append, committing an empty buffer, events illegal in the current state."""

from __future__ import annotations

import json

import pytest
from realtime_helpers import events_until, next_event, pcm16_b64, send, silence
from websockets.asyncio.client import connect

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


async def expect_error(ws, event_id: str, code: str) -> dict:
    event = await next_event(ws)
    assert event["type"] == "error", event
    assert event["event_id"] and event["error"]["event_id"] == event_id, event
    assert event["error"]["code"] == code, event
    return event["error"]


async def test_bad_events_are_refused_and_the_session_goes_on(voice_stack, spoken_hello):
    headers = {"Authorization": f"Bearer {voice_stack.user_secret}"}
    async with connect(voice_stack.ws_url("echo-voice"), additional_headers=headers, max_size=None) as ws:
        await events_until(ws, "rate_limits.updated")
        await send(ws, "session.update", event_id="e-manual", session={"turn_detection": None})
        assert (await next_event(ws))["type"] == "session.updated"

        await send(ws, "input_audio_buffer.sing", event_id="e1")
        await expect_error(ws, "e1", "invalid_event_type")

        await ws.send("{not json")
        event = await next_event(ws)
        assert event["type"] == "error" and event["error"]["code"] == "invalid_json"

        await send(ws, "input_audio_buffer.append", event_id="e2", audio="%%%not-base64%%%")
        error = await expect_error(ws, "e2", "invalid_base64")
        assert error["param"] == "audio"

        await send(ws, "input_audio_buffer.append", event_id="e3", audio="AAEC")  # 3 bytes: half a sample
        await expect_error(ws, "e3", "invalid_audio")

        await send(
            ws,
            "session.update",
            event_id="e4",
            session={"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}},
        )
        error = await expect_error(ws, "e4", "invalid_audio_format")
        assert error["param"] == "session.audio.input.format"
        await send(ws, "session.update", event_id="e5", session={"input_audio_format": "mp3"})
        await expect_error(ws, "e5", "invalid_audio_format")

        oversized = "A" * (15 * 1024 * 1024 + 4)
        await send(ws, "input_audio_buffer.append", event_id="e6", audio=oversized)
        await expect_error(ws, "e6", "audio_too_large")

        await send(ws, "input_audio_buffer.commit", event_id="e7")
        await expect_error(ws, "e7", "input_audio_buffer_commit_empty")

        await send(ws, "response.cancel", event_id="e8")
        await expect_error(ws, "e8", "response_cancel_not_active")
        await send(ws, "response.create", event_id="e9")
        await expect_error(ws, "e9", "conversation_empty")
        await send(ws, "conversation.item.truncate", event_id="e10", item_id="nope", content_index=0, audio_end_ms=5)
        await expect_error(ws, "e10", "item_not_found")
        await send(ws, "conversation.item.create", event_id="e11", item={"type": "function_call", "name": "f"})
        await expect_error(ws, "e11", "invalid_value")

        # after all that, a whole manual turn still works; a second response.create while it runs is refused
        await send(ws, "input_audio_buffer.append", audio=pcm16_b64(spoken_hello))
        await send(ws, "input_audio_buffer.commit")
        await events_until(ws, "conversation.item.done")
        await send(ws, "response.create", event_id="first")
        await send(ws, "response.create", event_id="second")
        events = await events_until(ws, "response.done")
        refusals = [e for e in events if e["type"] == "error"]
        assert [e["error"]["event_id"] for e in refusals] == ["second"]
        assert refusals[0]["error"]["code"] == "conversation_already_has_active_response"
        assert events[-1]["response"]["status"] == "completed"
        assert any(e["type"] == "response.output_audio.delta" for e in events)
        assert (await next_event(ws))["type"] == "rate_limits.updated"

        # binary frames are no protocol events
        await ws.send(b"\x00\x01")
        event = await next_event(ws)
        assert event["type"] == "error" and event["error"]["code"] == "invalid_event"
        await send(ws, "input_audio_buffer.append", audio=pcm16_b64(silence(0.2)))
        await send(ws, "input_audio_buffer.clear", event_id="clear")
        assert (await next_event(ws))["type"] == "input_audio_buffer.cleared"
        await send(ws, "conversation.item.delete", item_id=json.dumps(None))
        assert (await next_event(ws))["type"] == "error"
