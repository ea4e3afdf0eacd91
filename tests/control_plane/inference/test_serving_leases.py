"""Serving leases: held ones are renewed; once the last is released the renewal ends quietly
(no ZADD without members, no warning)."""

from __future__ import annotations

import asyncio
import logging

import redis.asyncio

from control_plane.inference import serving_leases as leases_module
from control_plane.inference.redis_names import serving_leases


async def test_a_held_lease_is_renewed_and_the_last_release_ends_the_renewal_quietly(redis_service, monkeypatch,
                                                                                      caplog):  # fmt: skip
    monkeypatch.setattr(leases_module, "RENEW_S", 0.05)
    client = redis.asyncio.Redis.from_url(redis_service)
    try:
        leases = leases_module.ServingLeases(client)
        await leases.hold("req-lease-test")
        first = await client.zscore(serving_leases(), "req-lease-test")
        for _ in range(200):  # until a renewal has landed (each is RENEW_S apart)
            if await client.zscore(serving_leases(), "req-lease-test") > first:
                break
            await asyncio.sleep(0.05)
        assert await client.zscore(serving_leases(), "req-lease-test") > first
        with caplog.at_level(logging.WARNING, logger=leases_module.__name__):
            await leases.release("req-lease-test")  # while the renewal sleeps
            await asyncio.wait_for(leases._renewing, timeout=5)
        assert caplog.records == []
        assert await client.zscore(serving_leases(), "req-lease-test") is None
    finally:
        await client.zrem(serving_leases(), "req-lease-test")
        await client.aclose()
