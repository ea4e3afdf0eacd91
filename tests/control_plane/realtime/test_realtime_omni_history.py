"""Multi-turn history over the tiny Qwen2.5-Omni: the stage request the thinker's replica
receives for the second spoken turn carries the first turn's user audio, byte for byte the
WAV recorded as that turn's input, before the first answer and the second turn's audio.

The requests are read off the thinker replica's input stream by a blocking XREAD issued
before each turn is spoken (the replica deletes an entry once processed, so the observer
must be waiting when it arrives)."""

from __future__ import annotations

import asyncio
import base64

import numpy as np
import pytest
import redis.asyncio
from asgiref.sync import sync_to_async
from realtime_helpers import chunks_of, events_until, pcm16_b64, recorded_audio, response_recorded, send, silence
from websockets.asyncio.client import connect

from stages import streams
from stages.protocol import StageRequest, decoder

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SHORT_OMNI = {"stages": {"thinker": {"sampling": {"max_tokens": 8}}, "talker": {"sampling": {"max_tokens": 40}}}}
OBSERVER = "thinker-observer"
read_request = decoder(StageRequest)


def thinker_stream(stack, deployment: str) -> str:
    body = stack.http("GET", f"/api/deployments/{deployment}/", secret=stack.operator_secret).json()
    (replica,) = [replica for replica in body["replicas"] if replica["stage"] == "thinker"]
    return streams.replica_input(replica["id"])


async def next_request(observer, stream: str) -> StageRequest:
    """The next stage request added to `stream` from now on."""
    last = "$"
    while True:
        for _, entries in await observer.xread({stream: last}, count=1, block=600_000):
            for entry_id, fields in entries:
                last = entry_id
                if fields[b"kind"] == b"request":
                    return read_request.decode(fields[b"data"])


async def until_waiting(client, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not any(c["name"] == OBSERVER and "b" in c["flags"] for c in await client.client_list()):
            await asyncio.sleep(0.05)


async def spoken_turn(ws, observer, client, stream: str, speech: np.ndarray) -> tuple[StageRequest, dict]:
    watching = asyncio.create_task(next_request(observer, stream))
    try:
        await until_waiting(client)
        for chunk in chunks_of(np.concatenate([silence(0.3), speech, silence(1.0)])):
            await send(ws, "input_audio_buffer.append", audio=pcm16_b64(chunk))
        done = await response_recorded(ws)
        assert done["status"] == "completed", done["status_details"]
        return await asyncio.wait_for(watching, 60), done
    finally:
        watching.cancel()


def audio_parts(request: StageRequest) -> list[bytes]:
    return [
        base64.b64decode(part["input_audio"]["data"])
        for message in request.messages
        if isinstance(message["content"], list)
        for part in message["content"]
        if part.get("type") == "input_audio"
    ]


async def test_the_first_turns_audio_is_in_the_second_turns_thinker_request(realtime_stack, tiny_omni, spoken_hello):
    realtime_stack.deploy("omni", "qwen2_5_omni", SHORT_OMNI, model_dir=str(tiny_omni))
    realtime_stack.wait_running("omni", timeout=600)
    stream = thinker_stream(realtime_stack, "omni")
    observer = redis.asyncio.Redis.from_url(realtime_stack.redis.url, client_name=OBSERVER)
    client = redis.asyncio.Redis.from_url(realtime_stack.redis.url)
    headers = {"Authorization": f"Bearer {realtime_stack.user_secret}"}
    try:
        async with connect(realtime_stack.ws_url("omni"), additional_headers=headers, max_size=None) as ws:
            await events_until(ws, "rate_limits.updated")
            first, first_done = await spoken_turn(ws, observer, client, stream, spoken_hello)
            second, second_done = await spoken_turn(ws, observer, client, stream, spoken_hello[::-1].copy())
    finally:
        await observer.aclose()
        await client.aclose()

    assert first.request_id == first_done["id"] and second.request_id == second_done["id"]
    assert second.sampling.max_tokens == 8  # the deployment's thinker sampling
    first_audio, second_audio = audio_parts(first), audio_parts(second)
    assert len(first_audio) == 1 and len(second_audio) == 2
    assert second_audio[0] == first_audio[0]  # turn 1's audio, again in turn 2's prompt
    assert second_audio[1] != first_audio[0]  # and after it, the new turn's
    await sync_to_async(realtime_stack.history_written)()
    assert second_audio[0] == await sync_to_async(recorded_audio)(first_done["id"], "in")
    assert second_audio[1] == await sync_to_async(recorded_audio)(second_done["id"], "in")

    roles = [message["role"] for message in second.messages if message["role"] != "system"]
    assert roles[0] == "user" and roles[-1] == "user" and roles.count("user") == 2
    transcript = first_done["output"][0]["content"][0]["transcript"]
    answers = [message["content"] for message in second.messages if message["role"] == "assistant"]
    assert answers == ([transcript] if transcript else [])  # the first answer between them (none when empty)
