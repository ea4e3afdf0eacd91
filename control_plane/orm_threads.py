"""ORM work from async code without the thread-sensitive funnel.

`sync_to_async(thread_sensitive=True)` (Django's default, and `database_sync_to_async`) runs
a request's calls on its one request thread; `orm_in_thread(function)` runs `function` on a
thread of the event loop's pool instead, and closes that thread's database connections when
it returns (with PostgreSQL, the connection goes back to the process's pool; CONN_MAX_AGE=0),
so concurrent requests' queries run side by side and no idle thread holds a connection.

    key = await orm_in_thread(load_key)(prefix)
    in_background(orm_in_thread(touch)(key))        # fire and forget, errors logged
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from asgiref.sync import AsyncToSync, sync_to_async
from django.db import close_old_connections

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

_background: set[asyncio.Task] = set()


def orm_in_thread(function: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    @functools.wraps(function)
    def pooled(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        finally:
            close_old_connections()

    @functools.wraps(function)
    async def call(*args, **kwargs):
        if _sync_caller_waiting():
            return await sync_to_async(function)(*args, **kwargs)
        return await sync_to_async(pooled, thread_sensitive=False)(*args, **kwargs)

    return call


def _sync_caller_waiting() -> bool:
    """Inside `async_to_sync` (Django's test client, a command) the sync caller's thread waits
    for us and holds the connection and its transaction: the query must run there to see it."""
    return getattr(AsyncToSync.executors, "current", None) is not None


def in_background(awaitable: Awaitable) -> None:
    """Run `awaitable` without waiting for it; a failure is logged, never raised to anyone."""

    async def run() -> None:
        try:
            await awaitable
        except Exception:
            log.exception("background database work failed")

    task = asyncio.get_running_loop().create_task(run())
    _background.add(task)
    task.add_done_callback(_background.discard)
