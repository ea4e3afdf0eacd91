"""Barge-in: the user speaks during a response; the server says speech_started, cancels the
response in every stage (the replicas drop the work), answers the new turn, and records
what the user heard of the cut response through conversation.item.truncate."""

from __future__ import annotations

import base64
import json

import pytest
import redis
from asgiref.sync import sync_to_async
from procs import wait_for
from realtime_helpers import chunks_of, events_until, next_event, pcm16_b64, send, silence
from websockets.asyncio.client import connect

from control_plane.inference.models import InferenceRequest
from stages import streams

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SLOW_VOICE = {"stages": {"echo": {"options": {"delay_s": 0.15}}, "voice": {"options": {"delay_s": 0.15}}}}
LONG_TEXT = " ".join(f"word{i}" for i in range(40))  # 40 steps of 0.15 s: 6 s if nobody interrupts


def replicas_running(stack, name: str) -> int:
    deployment = stack.http("GET", f"/api/deployments/{name}/", secret=stack.operator_secret).json()
    client = redis.Redis.from_url(stack.redis.url)
    try:
        beats = [client.get(streams.replica_heartbeat(replica["id"])) for replica in deployment["replicas"]]
    finally:
        client.close()
    return sum(json.loads(beat).get("running", 0) for beat in beats if beat)


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
        await send(ws, "response.create")
        before = await events_until(ws, "response.output_audio.delta")
        interrupted_id = next(e for e in before if e["type"] == "response.created")["response"]["id"]
        assistant_item = next(e for e in before if e["type"] == "response.output_item.added")["item"]["id"]
        assert await sync_to_async(replicas_running)(stack, "slow-voice") >= 1

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
        assert 0 < received_ms < 400  # 40 tones of 10 ms had the response run to its end
        # the stages dropped the request long before its 6 s were up
        wait_for(lambda: replicas_running(stack, "slow-voice") == 0, timeout=3, interval=0.1, what="work dropped")

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

    row = await sync_to_async(InferenceRequest.objects.get)(request_id=interrupted_id)
    assert row.status == "cancelled" and row.finish_reason == "cancelled"
    assert row.parameters["heard_audio_ms"] == played_ms
    assert len(row.parameters["heard_transcript"]) < len(LONG_TEXT)
