"""Barge-in: the user speaks during a response; the server says speech_started, cancels the
response in every stage (the replicas drop the work), answers the new turn, and records
what the user heard of the cut response through conversation.item.truncate."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import pytest
import redis
from asgiref.sync import sync_to_async
from procs import wait_for
from realtime_helpers import chunks_of, events_until, next_event, pcm16_b64, send, silence
from websockets.asyncio.client import connect

from control_plane.inference.models import InferenceRequest
from stages import streams

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

STEP_S = 0.15
SLOW_VOICE = {"stages": {"echo": {"options": {"delay_s": STEP_S}}, "voice": {"options": {"delay_s": STEP_S}}}}
WORD_COUNT = 200  # under the default of 512 output tokens (DEFAULT_MAX_TOKENS); one word per step
LONG_TEXT = " ".join(f"word{i}" for i in range(WORD_COUNT))
UNINTERRUPTED_RUN_S = WORD_COUNT * STEP_S
"""How long the response runs if nobody interrupts it: far longer than the waits below, so
stages that drop the work within those waits were cancelled, they did not just finish."""
WHOLE_ANSWER_MS = WORD_COUNT * 10  # the voice stage answers each word with a 10 ms tone
WAIT_S = 10  # generous for a loaded machine, well inside UNINTERRUPTED_RUN_S


def replicas_running(stack, name: str) -> int:
    deployment = stack.http("GET", f"/api/deployments/{name}/", secret=stack.operator_secret).json()
    client = redis.Redis.from_url(stack.redis.url)
    try:
        beats = [client.get(streams.replica_heartbeat(replica["id"])) for replica in deployment["replicas"]]
    finally:
        client.close()
    return sum(json.loads(beat).get("running", 0) for beat in beats if beat)


async def wait_for_replicas_running(stack, name: str, predicate, what: str) -> None:
    """Poll the heartbeats (off the event loop): they report the load every interval, not at once."""
    await asyncio.to_thread(wait_for, lambda: predicate(replicas_running(stack, name)), WAIT_S, 0.1, what)


async def test_speech_during_a_response_cancels_it_everywhere(realtime_stack, spoken_hello):
    stack = realtime_stack
    stack.deploy("slow-voice", "echo-voice", SLOW_VOICE)
    stack.wait_running("slow-voice")
    headers = {"Authorization": f"Bearer {stack.user_secret}"}
    async with connect(stack.ws_url("slow-voice"), additional_headers=headers) as ws:
        await events_until(ws, "rate_limits.updated")
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": LONG_TEXT}]}
        await send(ws, "conversation.item.create", item=item)
        await events_until(ws, "conversation.item.done")
        responded_at = time.monotonic()
        await send(ws, "response.create")
        before = await events_until(ws, "response.output_audio.delta")
        interrupted_id = next(e for e in before if e["type"] == "response.created")["response"]["id"]
        assistant_item = next(e for e in before if e["type"] == "response.output_item.added")["item"]["id"]
        await wait_for_replicas_running(stack, "slow-voice", lambda running: running >= 1, "the stages to run it")

        for chunk in chunks_of(spoken_hello):
            await send(ws, "input_audio_buffer.append", audio=pcm16_b64(chunk))
        cut = await events_until(ws, "response.done")
        types = [e["type"] for e in cut]
        assert types.index("input_audio_buffer.speech_started") < types.index("response.done")
        done = cut[-1]["response"]
        assert done["id"] == interrupted_id and done["status"] == "cancelled"
        assert done["status_details"]["reason"] == "turn_detected"
        assert done["output"][0]["status"] == "incomplete"
        audio_bytes = sum(
            len(base64.b64decode(e["delta"])) for e in before + cut if e["type"] == "response.output_audio.delta"
        )
        received_ms = audio_bytes // 2 * 1000 // 24000
        assert 0 < received_ms < WHOLE_ANSWER_MS
        await wait_for_replicas_running(stack, "slow-voice", lambda running: running == 0, "the work to be dropped")
        assert time.monotonic() - responded_at < UNINTERRUPTED_RUN_S  # dropped, not run to its end

        # the user's turn ends: it is answered
        for chunk in chunks_of(silence(1.0)):
            await send(ws, "input_audio_buffer.append", audio=pcm16_b64(chunk))
        answer = await events_until(ws, "response.done", timeout=60)
        assert answer[-1]["response"]["status"] == "completed"
        assert any(e["type"] == "input_audio_buffer.committed" for e in cut + answer)
        await events_until(ws, "rate_limits.updated")

        # the client played half of what it received before the user spoke
        played_ms = max(1, received_ms // 2)
        await send(ws, "conversation.item.truncate", item_id=assistant_item, content_index=0, audio_end_ms=played_ms)
        truncated = await next_event(ws)
        assert truncated["type"] == "conversation.item.truncated", truncated
        assert truncated["audio_end_ms"] == played_ms
        await send(ws, "conversation.item.truncate", event_id="late", item_id=assistant_item, content_index=0,
                   audio_end_ms=60000)  # fmt: skip
        assert (await next_event(ws))["error"]["param"] == "audio_end_ms"

    await sync_to_async(stack.history_written)()
    row = await sync_to_async(InferenceRequest.objects.get)(request_id=interrupted_id)
    assert row.status == "cancelled" and row.finish_reason == "cancelled"
    assert row.parameters["heard_audio_ms"] == played_ms
    assert len(row.parameters["heard_transcript"]) < len(LONG_TEXT)
