"""What each parallel test worker has to itself (tests/parallel_workers.py)."""

from __future__ import annotations

import os

from django.conf import settings
from parallel_workers import worker_number
from procs import redis_database_url


def test_another_database_of_the_same_server():
    assert redis_database_url("redis://:pw@cache:6380/0", 4) == "redis://:pw@cache:6380/4"
    assert redis_database_url("unix:///run/redis.sock?db=0&x=1", 2) == "unix:///run/redis.sock?x=1&db=2"


def test_this_worker_and_the_processes_it_starts_use_its_redis():
    """Under `make test` (workers): database 1 + the worker's number, or its own embedded server."""
    number = worker_number()
    if number is not None:
        own = f"/gw{number}/redis.sock" if settings.EMBEDDED_REDIS else f"/{number + 1}"
        assert own in settings.REDIS_URL
        assert os.environ["REDIS_URL"] == settings.REDIS_URL
        assert settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]["address"] == settings.REDIS_URL
