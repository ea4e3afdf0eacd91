"""Ends a replica host whose Celery worker died, so a killed worker leaves no orphan engine.

The host polls the worker's main pid. Once it is gone, `gone` is set and the host's loop
fails its requests and exits; if the host cannot get there in time (it is still building
its engine, or a step hangs), the watcher calls `on_timeout` (publish the error) and ends
the process itself.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from workers.processes import pid_alive

log = logging.getLogger(__name__)

PARENT_GONE_EXIT_CODE = 3


class ParentWatch:
    def __init__(
        self,
        parent_pid: int,
        *,
        poll_s: float = 0.5,
        grace_s: float = 5.0,
        on_timeout: Callable[[], None] = lambda: None,
    ):
        self.parent_pid = parent_pid
        self.poll_s = poll_s
        self.grace_s = grace_s
        self.on_timeout = on_timeout
        self.gone = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"parent-watch:{parent_pid}", daemon=True)

    def start(self) -> ParentWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.wait(self.poll_s):
            if not pid_alive(self.parent_pid):
                break
        if self._stopped.is_set():
            return
        log.error("parent process %d is gone: stopping", self.parent_pid)
        self.gone.set()
        if self._stopped.wait(self.grace_s):
            return
        log.error("the host did not stop within %.0f s of its parent's exit: ending it", self.grace_s)
        try:
            self.on_timeout()
        finally:
            os._exit(PARENT_GONE_EXIT_CODE)
