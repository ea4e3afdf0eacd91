"""A background thread that keeps a Redis key alive while its process lives.

Liveness is the key's existence: it expires `ttl_s` after the last beat, so a process
that dies (even with kill -9) disappears from readiness within the TTL.
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
    ):
        self.client = client
        self.key = key
        self.interval_s = interval_s
        self.ttl_ms = int(ttl_s * 1000)
        self.payload = payload or dict
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat:{key}", daemon=True)

    def beat(self) -> None:
        body = {"ts": time.time(), **self.payload()}
        self.client.set(self.key, json.dumps(body), px=self.ttl_ms)

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
