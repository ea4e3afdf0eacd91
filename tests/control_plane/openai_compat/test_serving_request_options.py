"""Chat's `additional_information` reaches every stage as the request's options
(`RequestOptions.extra`), never in `params`, which carries only data between stages.

The stage requests are read off the echo-voice replicas' input streams (the entry's and the
voice stage's) by blocking XREADs from the streams' ends as they were before the request was sent
(a replica deletes an entry once processed, so the observer must be waiting when it arrives)."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio

from stages import streams
from stages.protocol import StageRequest, decoder

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

OBSERVER = "options-observer"
EXTRA = {"probe": 7, "nested": {"layers": [0, -1]}}
read_request = decoder(StageRequest)


def replica_streams(stack, deployment: str) -> dict[str, str]:
    body = stack.http("GET", f"/api/deployments/{deployment}/", secret=stack.operator_secret).json()
    return {replica["stage"]: streams.replica_input(replica["id"]) for replica in body["replicas"]}


async def stream_ends(observer, names) -> dict[str, bytes | str]:
    """Each stream's last entry id now ("0-0" for one not made yet). Reads from these ids miss nothing
    added later; "$" would, since every XREAD takes it afresh: an entry added to one stream between
    two reads woken by another stream would be skipped."""
    ends = {}
    for name in names:
        try:
            ends[name] = (await observer.xinfo_stream(name))["last-generated-id"]
        except redis.ResponseError:
            ends[name] = "0-0"
    return ends


async def first_requests(observer, by_stage: dict[str, str]) -> dict[str, StageRequest]:
    """The first stage request added to each stream from now on, by stage name."""
    stage_of = {stream: stage for stage, stream in by_stage.items()}
    last = await stream_ends(observer, by_stage.values())
    seen: dict[str, StageRequest] = {}
    while len(seen) < len(by_stage):
        for stream, entries in await observer.xread(last, block=600_000):
            stream = stream.decode()
            for entry_id, fields in entries:
                last[stream] = entry_id
                if fields[b"kind"] == b"request" and stage_of[stream] not in seen:
                    seen[stage_of[stream]] = read_request.decode(fields[b"data"])
    return seen


async def until_waiting(client, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not any(c["name"] == OBSERVER and "b" in c["flags"] for c in await client.client_list()):
            await asyncio.sleep(0.05)


async def observed_chat(stack, body: dict) -> tuple[dict, dict[str, StageRequest]]:
    by_stage = replica_streams(stack, body["model"])
    assert set(by_stage) == {"echo", "voice"}
    observer = redis.asyncio.Redis.from_url(stack.redis.url, client_name=OBSERVER)
    client = redis.asyncio.Redis.from_url(stack.redis.url)
    watching = asyncio.create_task(first_requests(observer, by_stage))
    try:
        await until_waiting(client)
        response = await asyncio.to_thread(stack.http, "POST", "/v1/chat/completions", json=body)
        assert response.status_code == 200, response.text
        return response.json(), await asyncio.wait_for(watching, 60)
    finally:
        watching.cancel()
        await observer.aclose()
        await client.aclose()


async def test_additional_information_travels_in_options_to_every_stage(echo_stack):
    body = {
        "model": "echo-voice",
        "messages": [{"role": "user", "content": "said with options"}],
        "modalities": ["text", "audio"],
        "additional_information": {**EXTRA, "voice": "Ethan"},
    }
    reply, received = await observed_chat(echo_stack, body)

    message = reply["choices"][0]["message"]
    assert message["content"] == "said with options" and message["audio"]["data"]
    entry, voice = received["echo"], received["voice"]
    assert entry.stage_id == 0 and voice.stage_id == 1 and voice.seq == 0
    for request in (entry, voice):
        assert request.options.extra == EXTRA  # the voice key is the voice, not an option of the family
        assert request.options.voice == "Ethan" and request.options.modalities == ["text", "audio"]
        assert not set(EXTRA) & set(request.params), request.params
    assert entry.params == {}
    assert voice.params["source_stage"] == 0
