"""Sending requests to a live test platform through the serving path and reading them back."""

from __future__ import annotations

import asyncio
import time
import uuid

import redis.asyncio

from control_plane.orchestrator.serving import serve
from stages.protocol import RequestOptions, StageRequest


def request(text: str, **extra) -> StageRequest:
    return StageRequest(
        request_id=f"req-{uuid.uuid4().hex[:10]}",
        prompt=text,
        options=RequestOptions(extra=extra),
        arrival_time=time.time(),
    )


async def collect(
    stack, deployment_id: str, stage_request: StageRequest, timeout: float = 60.0, answered: set | None = None, **kwargs
):
    """The request's client messages; its id goes into `answered` once the first one came."""
    client = redis.asyncio.Redis.from_url(stack.redis.url)
    messages = []
    try:
        async with asyncio.timeout(timeout):
            async for message in serve(deployment_id, stage_request, client=client, **kwargs):
                messages.append(message)
                if answered is not None:
                    answered.add(stage_request.request_id)
    finally:
        await client.aclose()
    return messages


def text_of(messages) -> str:
    return "".join(m.output.text for m in messages if m.output is not None)
