"""Leases on running history rows: the process that serves a request says so every RENEW_S.

A row stays `running` while its request is served. If the serving process dies (a web process
killed, a whole platform stopped mid-request) nothing would ever close it; its lease stops
being renewed instead, and the history writer's orphan sweep (`orphan_sweep.py`) closes rows
whose lease is older than `HISTORY_ORPHAN_GRACE_S`. One renewal task per event loop renews
every lease held there in one round trip.
"""

from __future__ import annotations

import asyncio
import logging
import time

import redis

from control_plane.inference.redis_names import serving_leases

log = logging.getLogger(__name__)
RENEW_S = 5.0


class ServingLeases:
    def __init__(self, client):
        self.client = client
        self.held: set[str] = set()
        self._renewing: asyncio.Task | None = None

    def track(self, request_id: str) -> None:
        """Renew `request_id`'s lease from now on (whoever calls this wrote its first score, as
        the history append does in the round trip that opens the row)."""
        self.held.add(request_id)
        if self._renewing is None or self._renewing.done():
            self._renewing = asyncio.get_running_loop().create_task(self._renew())

    def untrack(self, request_id: str) -> None:
        self.held.discard(request_id)

    async def _renew(self) -> None:
        while self.held:
            await asyncio.sleep(RENEW_S)
            if not self.held:  # the last one was released while this slept: nothing to renew
                break
            now = time.time()
            try:
                await self.client.zadd(serving_leases(), dict.fromkeys(self.held, now))
            except redis.RedisError as error:
                log.warning("serving leases not renewed: %s", error)


_per_loop: dict[int, ServingLeases] = {}


def leases_for(client) -> ServingLeases:
    """The leases of the running event loop (one renewal task each)."""
    key = id(asyncio.get_running_loop())
    leases = _per_loop.get(key)
    if leases is None:
        leases = _per_loop[key] = ServingLeases(client)
    return leases
