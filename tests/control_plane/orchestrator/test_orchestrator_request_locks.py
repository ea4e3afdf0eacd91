"""Orchestrators share requests through per-request locks in Redis: a batch of events takes the
locks of every request it touches at once, or none of them."""

from __future__ import annotations

import threading
import time
import uuid

import redis

from control_plane.orchestrator.driver import RedisOrchestrator
from stages import streams


def test_a_batch_takes_all_its_request_locks_or_none_so_two_orchestrators_never_wait_each_other_out(redis_service):
    client = redis.Redis.from_url(redis_service)
    first, second = (
        RedisOrchestrator(client, orchestrator_id="first"),
        RedisOrchestrator(client, orchestrator_id="second"),
    )
    a, b = f"locks-a-{uuid.uuid4().hex[:8]}", f"locks-b-{uuid.uuid4().hex[:8]}"
    lock_a, lock_b = streams.request_lock(a), streams.request_lock(b)
    try:
        assert first._lock_and_load([a], "first-1") == [lock_a]
        taken: dict[str, list[str]] = {}
        waiter = threading.Thread(target=lambda: taken.update(keys=second._lock_and_load([a, b], "second")))
        waiter.start()
        time.sleep(0.2)
        assert client.get(lock_b) is None  # waiting for a, the second holds nothing
        assert first._lock_and_load([b], "first-2") == [lock_b]  # so the first's next batch is not held up
        client.delete(lock_a, lock_b)
        waiter.join(timeout=5)
        assert taken["keys"] == [lock_a, lock_b]
        assert client.mget(lock_a, lock_b) == [b"second", b"second"]
    finally:
        client.delete(lock_a, lock_b)
        client.close()
