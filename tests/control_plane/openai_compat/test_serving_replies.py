"""Requests served through one async client share one Submit pipeline and one reply stream, and
each gets exactly its own messages back (an orchestrator stand-in answers them in a shuffled order)."""

from __future__ import annotations

import asyncio
import random
import uuid

import redis.asyncio
from django.conf import settings

from control_plane.orchestrator import wire
from control_plane.orchestrator.serving import serve
from stages import streams
from stages.orchestrator import Complete, Emit, RequestSummary, Submit
from stages.protocol import StageOutput, StageRequest


async def answer(client: redis.asyncio.Redis, prefix: str, count: int, submits: list[Submit]) -> None:
    """Read `count` Submits whose ids start with `prefix`, then answer each with two outputs and a
    Complete on its reply stream, interleaving the requests."""
    last = "$"
    while len(submits) < count:
        for _, entries in await client.xread({streams.orchestrator_inbox(): last}, block=1000) or []:
            for entry_id, fields in entries:
                last = entry_id
                event = wire.decode_event(fields[b"data"])
                if isinstance(event, Submit) and event.request.request_id.startswith(prefix):
                    submits.append(event)
    messages = []
    for submit in submits:
        request_id = submit.request.request_id
        outputs = [
            StageOutput(request_id=request_id, seq=seq, text=f"{submit.request.prompt}/{seq} ") for seq in (0, 1)
        ]
        messages.append([Emit(request_id=request_id, reply_to=submit.reply_to, output=output) for output in outputs])
        messages[-1].append(Complete(request_id=request_id, reply_to=submit.reply_to, summary=RequestSummary()))
    random.Random(0).shuffle(messages)
    while any(messages):
        for queue in messages:
            if queue:
                action = queue.pop(0)
                await client.xadd(action.reply_to, wire.reply_message(action))


async def test_concurrent_requests_share_one_reply_stream_and_get_their_own_messages(redis_service):
    client = redis.asyncio.Redis.from_url(settings.REDIS_URL)
    prefix = f"replies-{uuid.uuid4().hex[:8]}-"
    submits: list[Submit] = []

    async def one(index: int) -> str:
        request = StageRequest(request_id=f"{prefix}{index}", prompt=f"p{index}")
        messages = [message async for message in serve("some-deployment", request, client=client)]
        assert [message.kind for message in messages] == ["output", "output", "complete"]
        return "".join(message.output.text for message in messages[:2])

    try:
        orchestrator = asyncio.create_task(answer(client, prefix, 20, submits))
        await asyncio.sleep(0.1)  # its first XREAD is waiting
        texts = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(20))), timeout=30)
        await orchestrator
        assert texts == [f"p{i}/0 p{i}/1 " for i in range(20)]
        (reply_stream,) = {submit.reply_to for submit in submits}
        assert reply_stream.startswith(streams.client_replies(""))
        async with asyncio.timeout(5):  # the reader trims what it has read, after handing it out
            while await client.xlen(reply_stream) > 1:
                await asyncio.sleep(0.02)
    finally:
        await client.aclose()
