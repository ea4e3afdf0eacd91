"""Django's ASGI handler without a new thread per request.

Django runs each request in a `ThreadSensitiveContext` of its own, whose first
`sync_to_async(thread_sensitive=True)` call starts a thread that the end of the request joins:
a thread started and joined per request, even for a view that never leaves the event loop
(Django itself makes one such call, to close the response). Here a request borrows a
single-thread executor from a free list and gives it back when it ends, so threads are reused
and two requests never share one (a slow call of one request cannot hold up another).

`request_started`'s receivers (`close_old_connections`, `reset_queries`) are sync, so Django
sends them through a thread hop per request; they have nothing to do in this handler's
requests (connections are closed when each request finishes, CONN_MAX_AGE=0, and the query
log only fills under DEBUG), so `skip_request_started_receivers` disconnects them in the web
process.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext
from django.core import signals
from django.core.handlers.asgi import ASGIHandler
from django.db import close_old_connections, reset_queries

KEEP_IDLE_THREADS = 64


class RequestThreads:
    """Single-thread executors lent to requests; at most `keep_idle` idle ones are kept."""

    def __init__(self, keep_idle: int = KEEP_IDLE_THREADS):
        self.keep_idle = keep_idle
        self._idle: list[ThreadPoolExecutor] = []

    def borrow(self) -> ThreadPoolExecutor:
        if self._idle:
            return self._idle.pop()
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")

    def give_back(self, executor: ThreadPoolExecutor) -> None:
        if len(self._idle) < self.keep_idle:
            self._idle.append(executor)
        else:
            executor.shutdown(wait=False)


class PooledThreadASGIHandler(ASGIHandler):
    def __init__(self):
        super().__init__()
        self.request_threads = RequestThreads()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        executor = self.request_threads.borrow()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            self.request_threads.give_back(executor)


def skip_request_started_receivers() -> None:
    signals.request_started.disconnect(close_old_connections)
    signals.request_started.disconnect(reset_queries)


def get_asgi_application() -> PooledThreadASGIHandler:
    """Django's `get_asgi_application`, with this handler."""
    import django

    django.setup(set_prefix=False)
    skip_request_started_receivers()
    return PooledThreadASGIHandler()
