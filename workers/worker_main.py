"""The pid of this Celery worker's main process, which the replica hosts it starts watch.

Tasks run in pool children (prefork), which the worker replaces at will; the hosts must
live as long as the worker itself, so they watch the main process instead.
"""

from __future__ import annotations

import os

from celery.signals import worker_init

_main_pid: int | None = None


@worker_init.connect
def remember_main_pid(**kwargs) -> None:
    global _main_pid
    _main_pid = os.getpid()


def worker_main_pid() -> int:
    if _main_pid is not None:
        return _main_pid
    from billiard.process import current_process

    in_pool_child = current_process().name != "MainProcess"
    return os.getppid() if in_pool_child else os.getpid()
