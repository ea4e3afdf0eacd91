"""The serving path for the API: submit a request to a deployment and iterate its outputs.

    async for message in serve(deployment, request):
        ...  # message.kind: "output" (message.output), then "complete" or "fail"

Works the same embedded and against external Redis. A client that stops iterating
(disconnect) cancels the request in every stage. A request whose orchestrators are all gone
(no orchestrator heartbeat) ends with `ServingUnavailable` within about a heartbeat TTL plus
ORCHESTRATOR_CHECK_S, instead of waiting out the idle timeout; a restarted orchestrator
adopts requests whose state is still in Redis.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import redis
import redis.asyncio

from control_plane.orchestrator import wire
from control_plane.orchestrator.replies import LOST, reader_for
from control_plane.orchestrator.request_span import RequestSpan
from control_plane.redis_client import get_async_redis
from stages import streams
from stages.orchestrator import Cancel, InputChunk, Submit
from stages.protocol import SamplingParams, StageError, StageRequest

ORCHESTRATOR_CHECK_S = 5.0
"""After this long without a message, a request checks that some orchestrator still lives."""


class ServingUnavailable(Exception):
    """The platform cannot take or finish the request right now (Redis down, timeout)."""


async def cancel(client: redis.asyncio.Redis, request_id: str, reason: str = "cancelled by the client") -> None:
    event = Cancel(request_id=request_id, reason=reason, at=time.time())
    await client.xadd(streams.orchestrator_inbox(), wire.encode_event(event))


async def send_chunk(client: redis.asyncio.Redis, request_id: str, chunk: StageRequest) -> None:
    event = InputChunk(request_id=request_id, chunk=chunk, at=time.time())
    await client.xadd(streams.orchestrator_inbox(), wire.encode_event(event))


async def serve(
    deployment_id: str,
    request: StageRequest,
    sampling: dict[str, SamplingParams] | None = None,
    *,
    idle_timeout_s: float = 60.0,
    client: redis.asyncio.Redis | None = None,
    parent_trace: str = "",
) -> AsyncIterator[wire.ClientMessage]:
    """Submit and yield the request's client messages until it completes or fails.

    The messages come through the client's reply reader (`replies.py`): pass one client
    for many requests (one per event loop) and they share one Submit pipeline and one read.
    `idle_timeout_s` bounds the wait for the next message (the orchestrator's per-hop
    timeouts fire first; this guards against a dead orchestrator). Leaving the loop
    early cancels the request. The request's trace (`request_span.py`) continues
    `parent_trace`, the client's traceparent, when it is one.
    """
    own_client = client is None
    client = client or get_async_redis()
    reader = reader_for(client)
    queue = reader.register(request.request_id)
    ended = False
    seen: set[tuple[int, int]] = set()
    span = RequestSpan(deployment_id, request, parent_trace)
    try:
        event = Submit(
            deployment_id=deployment_id,
            request=request,
            sampling=sampling or {},
            reply_to=reader.stream,
            at=time.time(),
        )
        try:
            await reader.send(wire.encode_event(event))
        except redis.RedisError as error:
            raise ServingUnavailable(f"the platform's Redis is unavailable: {error}") from None
        while True:
            fields = await _next_message(client, queue, idle_timeout_s)
            if fields is LOST:
                raise ServingUnavailable(f"lost the platform's Redis mid-request: {reader.failure}")
            message = wire.decode_client_message(fields)
            if message.output is not None:
                mark = (message.output.stage_id, message.output.seq)
                if mark in seen:
                    continue  # a redelivery after an orchestrator restart
                seen.add(mark)
            # the request ended on the platform's side: a consumer that stops at this message
            # (and closes the generator here) has nothing left to cancel
            ended = message.kind in ("complete", "fail")
            if ended:
                span.ending(message.kind, message.error.message if message.error else None)
            yield message
            if ended:
                return
    except ServingUnavailable as error:
        span.ending("unavailable", str(error))
        raise
    finally:
        span.record()
        reader.unregister(request.request_id)
        if not ended:
            await _cancel_on_a_fresh_connection(client, request.request_id)
        if own_client:
            reader.close()
            await client.aclose()


async def _next_message(client: redis.asyncio.Redis, queue: asyncio.Queue, idle_timeout_s: float):
    """The request's next message; raises when none came for `idle_timeout_s`, or sooner when no
    orchestrator lives to send one."""
    waited = 0.0
    while True:
        step = min(ORCHESTRATOR_CHECK_S, idle_timeout_s - waited)
        try:
            async with asyncio.timeout(step):
                return await queue.get()
        except TimeoutError:
            waited += step
        if waited >= idle_timeout_s:
            raise ServingUnavailable(f"no output for {idle_timeout_s:.0f} s; the request was cancelled")
        if not await _an_orchestrator_lives(client):
            raise ServingUnavailable("no orchestrator is running (it stopped mid-request); the request was cancelled")


async def _an_orchestrator_lives(client: redis.asyncio.Redis) -> bool:
    try:
        async for _ in client.scan_iter(match=streams.orchestrator_heartbeat_pattern(), count=1000):
            return True
    except redis.RedisError:
        return True  # Redis trouble is told by the reply reader (LOST)
    return False


CANCEL_TIMEOUT_S = 5.0


async def _cancel_on_a_fresh_connection(client: redis.asyncio.Redis, request_id: str) -> None:
    """Tell the orchestrator the client left, on a new connection to the same server: the client's own
    pool may be the reason the request is leaving (exhausted, or a connection cut mid-command by a
    cancellation, which then waits forever for its reply). Bounded, and best effort: the
    orchestrator's timeouts end the request too."""
    pool = client.connection_pool
    fresh = redis.asyncio.Redis(
        connection_pool=redis.asyncio.ConnectionPool(connection_class=pool.connection_class, **pool.connection_kwargs)
    )
    try:
        await asyncio.wait_for(cancel(fresh, request_id), timeout=CANCEL_TIMEOUT_S)
    except (redis.RedisError, TimeoutError):
        pass
    finally:
        await fresh.aclose()


def error_of(message: wire.ClientMessage) -> StageError:
    return message.error or StageError(message="unknown failure")
