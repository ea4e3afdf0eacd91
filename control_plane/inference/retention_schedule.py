"""The periodic run of the history retention cleanup, for a long-running process (the
orchestrator loop calls `poll()` on every turn).

Once per `HISTORY_CLEANUP_INTERVAL_S` across every orchestrator: a run starts only when its
process takes the lease key (`SET NX` with the interval as expiry). The key is never
released, so it also marks the last run: whoever takes it after it expired runs the next
one, and a restarted orchestrator does not run again early. The cleanup runs in a thread so
that deleting many rows and files never holds up request routing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis
from django.db import connections

from control_plane.inference import retention
from stages import streams

log = logging.getLogger(__name__)

LEASE_CHECK_S = 10.0  # how often a process asks for the lease, at most


def retention_lease() -> str:
    return f"{streams.PREFIX}:lease:history-retention"


class RetentionSchedule:
    def __init__(
        self,
        client: redis.Redis,
        owner: str,
        *,
        interval_s: float | None = None,
        cleanup: Callable[[], int] = retention.cleanup,
    ):
        self.client = client
        self.owner = owner
        self.interval_s = retention.cleanup_interval_s() if interval_s is None else interval_s
        self.cleanup = cleanup
        self.running: threading.Thread | None = None
        self._next_check = 0.0

    def poll(self) -> threading.Thread | None:
        """Start a cleanup if one is due and this process got the lease; the thread, or None."""
        now = time.monotonic()
        if now < self._next_check or (self.running is not None and self.running.is_alive()):
            return None
        self._next_check = now + min(LEASE_CHECK_S, self.interval_s)
        if not self._take_lease():
            return None
        self.running = threading.Thread(target=self._run, name="history-retention", daemon=True)
        self.running.start()
        return self.running

    def _take_lease(self) -> bool:
        try:
            return bool(self.client.set(retention_lease(), self.owner, nx=True, px=int(self.interval_s * 1000)))
        except redis.RedisError as error:
            log.warning("history retention: lease not checked (%s)", error)
            return False

    def _run(self) -> None:
        try:
            removed = self.cleanup()
            if removed:
                log.info(
                    "history retention: deleted %d requests older than %s days", removed, retention.retention_days()
                )
        except Exception:
            log.exception("history retention cleanup failed")
        finally:
            connections.close_all()  # this thread's own database connection
