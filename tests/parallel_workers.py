"""What each pytest-xdist worker has to itself when the suite runs in parallel (`make test` runs
`-n`): a Redis database of its own, so that keys named after rows (users, deployments) that two
workers' databases number alike never meet; pytest-django already gives each worker its own test
database. Tests that share a machine-wide resource run on one worker (`xdist_group`). Of Redis's 16
databases the workers take 1-4 (the Makefile allows at most 4 workers) and the worker tests 10-13."""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings

SAME_WORKER = {"tests/hosts/": "hosts"}
"""Test folders whose tests run on one worker: the two-host test bed's network namespaces take fixed
private subnets."""


def worker_number() -> int | None:
    """This process's xdist worker number (gw3 -> 3); None when the suite runs in one process."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return int(worker.removeprefix("gw")) if worker else None


def worker_database(first: int) -> int:
    """A Redis database number that no other worker uses, for tests that keep one to themselves:
    `first` plus the worker's number (`first` itself in a serial run)."""
    return first + (worker_number() or 0)


def redis_url_of_worker(url: str, number: int) -> str:
    """`url` pointed at database number + 1 (database 0 stays the serial suite's and `make run`'s)."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{number + 1}"))


def isolate_worker() -> None:
    """Point this worker's settings, and the processes its tests start, at a Redis of its own: a
    database of the configured server, or in embedded mode a redis-server of its own."""
    number = worker_number()
    if number is None:
        return
    if settings.EMBEDDED_REDIS:
        settings.EMBEDDED_REDIS_SOCKET = settings.EMBEDDED_REDIS_SOCKET.parent / f"gw{number}" / "redis.sock"
        url = f"unix://{settings.EMBEDDED_REDIS_SOCKET}"
    else:
        url = redis_url_of_worker(settings.REDIS_URL, number)
        os.environ["REDIS_URL"] = url
    settings.REDIS_URL = url
    settings.CELERY_BROKER_URL = url.replace("unix://", "redis+socket://", 1)
    settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]["address"] = url


def group_of(path: str) -> str:
    """The xdist group of a test file: its folder's shared group, else the file itself (a file's
    tests share its live stack, so they stay together)."""
    for folder, group in SAME_WORKER.items():
        if path.startswith(folder):
            return group
    return path
