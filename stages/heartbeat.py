"""A background thread that keeps a Redis key alive while its process lives.

Liveness is the key's existence: it expires `ttl_s` after the last beat, so a process
that dies (even with kill -9) disappears from readiness within the TTL.

With `lease_after_s`, the key is also a lease: a process cut off from Redis longer than that
(a network partition: its beats failed) was given up by the control plane meanwhile, so when
it reaches Redis again and finds its key gone, it does not write it back; it calls `on_lost`
instead. A key gone because Redis itself restarted (a new `run_id`), or because the process
was too starved of CPU to beat in time (no beat failed), is written back as before.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

import redis

log = logging.getLogger(__name__)


class Heartbeat:
    def __init__(
        self,
        client: redis.Redis,
        key: str,
        *,
        interval_s: float = 2.0,
        ttl_s: float = 10.0,
        payload: Callable[[], dict] | None = None,
        lease_after_s: float | None = None,
        on_lost: Callable[[], None] | None = None,
    ):
        self.client = client
        self.key = key
        self.interval_s = interval_s
        self.ttl_ms = int(ttl_s * 1000)
        self.payload = payload or dict
        self.lease_after_s = lease_after_s
        self.on_lost = on_lost
        self.lost = threading.Event()
        self._written_at: float | None = None
        self._failed_since_written = False
        self._run_id: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat:{key}", daemon=True)

    def beat(self, *, force: bool = False) -> None:
        """Write the key (`force`: even after the lease was lost, e.g. a last ERROR status)."""
        if self.lost.is_set() and not force:
            return
        body = json.dumps({"ts": time.time(), **self.payload()})
        if force or self.lease_after_s is None or self._written_at is None:
            self.client.set(self.key, body, px=self.ttl_ms)
            self._wrote()
            return
        try:
            written = self.client.set(self.key, body, px=self.ttl_ms, xx=True)
        except redis.RedisError:
            self._failed_since_written = True
            raise
        if written:
            self._wrote()
            return
        silent_s = time.monotonic() - self._written_at
        cut_off = self._failed_since_written and silent_s > self.lease_after_s
        if not cut_off or self._redis_restarted():
            self.client.set(self.key, body, px=self.ttl_ms)
            self._wrote()
            return
        log.warning("heartbeat %s: cut off from Redis for %.1f s, its key expired: lease lost", self.key, silent_s)
        self.lost.set()
        if self.on_lost is not None:
            self.on_lost()

    def _wrote(self) -> None:
        self._written_at = time.monotonic()
        self._failed_since_written = False
        if self.lease_after_s is not None and self._run_id is None:
            self._run_id = self._server_run_id()

    def _redis_restarted(self) -> bool:
        run_id = self._server_run_id()
        restarted = run_id != self._run_id
        self._run_id = run_id
        return restarted

    def _server_run_id(self) -> str:
        return str(self.client.info("server").get("run_id", ""))

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval_s * 2)
        try:
            self.client.delete(self.key)
        except redis.RedisError:
            pass

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.beat()
            except redis.RedisError as error:  # Redis restarting: keep trying, readiness shows it
                log.warning("heartbeat %s failed: %s", self.key, error)
            self._stop.wait(self.interval_s)
