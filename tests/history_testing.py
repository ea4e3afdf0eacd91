"""Helpers for tests that read request history written by a live platform: the history
writer's process, and waiting until it has written everything accepted so far."""

from __future__ import annotations

import redis
from procs import PYTHON, wait_for

HISTORY_WRITER = [PYTHON, "manage.py", "history_writer"]


def pending_count(redis_url: str) -> int:
    from control_plane.inference.redis_names import pending_all

    client = redis.Redis.from_url(redis_url, socket_timeout=2)
    try:
        return client.scard(pending_all())
    finally:
        client.close()


def history_written(redis_url: str, timeout: float = 60.0) -> None:
    """Wait until every history event accepted so far is in the database (nothing pending)."""
    wait_for(lambda: pending_count(redis_url) == 0, timeout=timeout, interval=0.1, what="the history writer")
