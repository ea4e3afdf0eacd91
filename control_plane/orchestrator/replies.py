"""One reader and one writer per async Redis client for every request it serves.

Without it each request costs its client a command for its Submit and a blocking XREAD
on its own output stream per batch of messages; under a burst of concurrent requests
those commands, not the orchestrator, were most of the serving path's time. Here the
Submits of one event-loop turn go out in one pipeline, and the orchestrator writes the
client messages of all the client's requests onto one reply stream (`Submit.reply_to`),
which one task reads and hands out to each request's queue.

If that read fails (Redis gone), every request waiting on the reader gets `LOST` and the
reader is dropped: the next request starts a new one on a new stream.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
import weakref

import redis
import redis.asyncio

from stages import streams

LOST = object()
"""Put into each waiting request's queue when the reader lost Redis (the queue's last item)."""
READ_BLOCK_MS = 1000
READ_COUNT = 1024


class ReplyReader:
    def __init__(self, client: redis.asyncio.Redis):
        self.client = client
        self.loop = asyncio.get_running_loop()
        self.stream = streams.client_replies(f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}")
        self.queues: dict[str, asyncio.Queue] = {}
        self.failure: BaseException | None = None
        self._unsent: list[tuple[dict, asyncio.Future]] = []
        self._sending: set[asyncio.Task] = set()
        self._task = self.loop.create_task(self._read_forever(), name=f"replies {self.stream}")

    # ------------------------------------------------------------------ requests

    def register(self, request_id: str) -> asyncio.Queue:
        """The queue `request_id`'s client messages (raw stream fields) arrive in; call before submitting."""
        queue: asyncio.Queue = asyncio.Queue()
        self.queues[request_id] = queue
        return queue

    def unregister(self, request_id: str) -> None:
        self.queues.pop(request_id, None)

    async def send(self, fields: dict) -> None:
        """XADD `fields` to the orchestrator inbox, in one pipeline with the other sends of this loop turn."""
        future = self.loop.create_future()
        self._unsent.append((fields, future))
        if len(self._unsent) == 1:
            self.loop.call_soon(self._flush)
        await future

    def close(self) -> None:
        self._task.cancel()

    # ------------------------------------------------------------------ internals

    def _flush(self) -> None:
        batch, self._unsent = self._unsent, []
        task = self.loop.create_task(self._send_batch(batch))
        self._sending.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(self._sending.discard)

    async def _send_batch(self, batch: list[tuple[dict, asyncio.Future]]) -> None:
        try:
            pipe = self.client.pipeline(transaction=False)
            for fields, _ in batch:
                pipe.xadd(streams.orchestrator_inbox(), fields)
            await pipe.execute()
        except Exception as error:
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        for _, future in batch:
            if not future.done():
                future.set_result(None)

    async def _read_forever(self) -> None:
        last_id = "0"
        try:
            while True:
                try:
                    entries = await self.client.xread({self.stream: last_id}, count=READ_COUNT, block=READ_BLOCK_MS)
                except redis.TimeoutError:
                    continue  # a client socket timeout shorter than the block
                for _, messages in entries or []:
                    for entry_id, fields in messages:
                        last_id = entry_id
                        queue = self.queues.get(fields.get(b"request", b"").decode())
                        if queue is not None:
                            queue.put_nowait(fields)
                    if messages:
                        await self.client.xtrim(self.stream, minid=last_id, approximate=False)  # read once only
        except Exception as error:
            self.failure = error
            for queue in self.queues.values():
                queue.put_nowait(LOST)
        finally:
            if _readers.get(self.client) is self:
                del _readers[self.client]


_readers: weakref.WeakKeyDictionary[redis.asyncio.Redis, ReplyReader] = weakref.WeakKeyDictionary()


def reader_for(client: redis.asyncio.Redis) -> ReplyReader:
    """The reader of `client` on the running loop (a new one after a failure, or on another loop)."""
    reader = _readers.get(client)
    if reader is None or reader.failure is not None or reader.loop is not asyncio.get_running_loop():
        reader = _readers[client] = ReplyReader(client)
    return reader
