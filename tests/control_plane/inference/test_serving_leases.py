"""Serving leases: the history append that opens a running row writes its lease and the one that
ends it drops it; held ones are renewed; once the last is untracked the renewal ends quietly (no
ZADD without members, no warning)."""

from __future__ import annotations

import asyncio
import logging
import time

import redis.asyncio

from control_plane.inference import serving_leases as leases_module
from control_plane.inference.history_events import RowStarted
from control_plane.inference.history_log import history_append
from control_plane.inference.redis_names import pending_all, row_key, serving_leases

REQUEST = "req-lease-test"


async def test_the_history_append_writes_the_lease_it_is_renewed_and_the_ending_append_drops_it(
    redis_service, monkeypatch, caplog
):
    monkeypatch.setattr(leases_module, "RENEW_S", 0.05)
    client = redis.asyncio.Redis.from_url(redis_service)
    event = RowStarted(row_id="row-lease-test", started_at=time.time(), attempts=1)
    try:
        leases = leases_module.ServingLeases(client)
        await history_append(client, REQUEST, None, [event], lease="hold")
        leases.track(REQUEST)
        first = await client.zscore(serving_leases(), REQUEST)
        assert first is not None
        for _ in range(200):  # until a renewal has landed (each is RENEW_S apart)
            if await client.zscore(serving_leases(), REQUEST) > first:
                break
            await asyncio.sleep(0.05)
        assert await client.zscore(serving_leases(), REQUEST) > first
        with caplog.at_level(logging.WARNING, logger=leases_module.__name__):
            leases.untrack(REQUEST)  # while the renewal sleeps
            await history_append(client, REQUEST, None, [event], lease="release")
            await asyncio.wait_for(leases._renewing, timeout=5)
        assert caplog.records == []
        assert await client.zscore(serving_leases(), REQUEST) is None
    finally:
        await client.zrem(serving_leases(), REQUEST)
        await client.srem(pending_all(), REQUEST)
        await client.delete(row_key(REQUEST))
        await client.aclose()
