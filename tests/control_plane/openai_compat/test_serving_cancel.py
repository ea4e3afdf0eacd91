"""Leaving `serve()` while it waits for output tells the orchestrator at once, on a connection of its own
(the client's pool may be why it is leaving)."""

from __future__ import annotations

import asyncio
import uuid

import redis
from django.conf import settings

from control_plane.orchestrator import wire
from control_plane.orchestrator.serving import serve
from stages import streams
from stages.orchestrator import Cancel, Submit
from stages.protocol import StageRequest


def inbox_events(request_id: str) -> list:
    client = redis.Redis.from_url(settings.REDIS_URL)
    events = [wire.decode_event(fields[b"data"]) for _, fields in client.xrange(streams.orchestrator_inbox())]
    client.close()
    return [event for event in events if wire.request_id_of(event) == request_id]


async def consume_until_cancelled(request: StageRequest) -> None:
    async for _ in serve("no-such-deployment", request, idle_timeout_s=60):
        pass


def test_a_cancelled_consumer_sends_the_cancel_within_bounds(redis_service):
    request = StageRequest(request_id=f"cancel-{uuid.uuid4().hex}", prompt="hello")

    async def scenario() -> None:
        task = asyncio.create_task(consume_until_cancelled(request))
        for _ in range(50):  # until serve() submitted and waits for output
            if inbox_events(request.request_id):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        task.cancel()
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), timeout=10)

    asyncio.run(scenario())
    kinds = [type(event) for event in inbox_events(request.request_id)]
    assert kinds == [Submit, Cancel]
