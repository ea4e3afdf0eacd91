"""Removes shared-memory payload segments nobody collected (their reader or writer died).

Every worker pool process runs one, so a host's /dev/shm is swept while any worker lives
there. Segments are swept once older than the payload TTL, like Redis payload keys expire.
"""

from __future__ import annotations

import logging
import threading

from stages.connectors import PAYLOAD_TTL_S, sweep

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 60.0


class ShmSweeper:
    def __init__(self, *, interval_s: float = SWEEP_INTERVAL_S, max_age_s: float = PAYLOAD_TTL_S):
        self.interval_s = interval_s
        self.max_age_s = max_age_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shm-sweeper", daemon=True)

    def start(self) -> ShmSweeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                removed = sweep(self.max_age_s)
            except OSError as error:
                log.warning("sweeping /dev/shm failed: %s", error)
                continue
            if removed:
                log.info("removed %d shared-memory payloads nobody collected", removed)
