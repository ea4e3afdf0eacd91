"""What each pytest-xdist worker has to itself when the suite runs in parallel (`make test` runs
`-n`): a Redis database of its own, so that keys named after rows (users, deployments) that two
workers' databases number alike never meet; pytest-django already gives each worker its own test
database. Of Redis's 16 databases the workers take 1-4 (the Makefile allows at most 4 workers) and
the worker tests 10-13; the two-host test bed takes private subnets after the worker's number."""

from __future__ import annotations

import os

from django.conf import settings
from procs import redis_database_url

from control_plane.settings import _redis_to_celery


def worker_number() -> int | None:
    """This process's xdist worker number (gw3 -> 3); None when the suite runs in one process."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return int(worker.removeprefix("gw")) if worker else None


def worker_database(first: int) -> int:
    """A Redis database number that no other worker uses, for tests that keep one to themselves:
    `first` plus the worker's number (`first` itself in a serial run)."""
    return first + (worker_number() or 0)


def isolate_worker() -> None:
    """Point this worker's settings, and the processes its tests start, at a Redis of its own:
    database 1 + its number of the configured server (0 stays the serial suite's and `make run`'s),
    or in embedded mode a redis-server of its own (tests/conftest.py starts it)."""
    number = worker_number()
    if number is None:
        return
    if settings.EMBEDDED_REDIS:
        settings.EMBEDDED_REDIS_SOCKET = settings.EMBEDDED_REDIS_SOCKET.parent / f"gw{number}" / "redis.sock"
        url = f"unix://{settings.EMBEDDED_REDIS_SOCKET}"
    else:
        url = redis_database_url(settings.REDIS_URL, number + 1)
    os.environ["REDIS_URL"] = url
    settings.REDIS_URL = url
    settings.CELERY_BROKER_URL = _redis_to_celery(url)
    settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]["address"] = url
