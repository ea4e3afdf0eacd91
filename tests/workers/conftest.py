"""Fixtures of the worker tests: a Redis database of their own and a client that leaves no submissions
and no ended-request list behind (test request ids repeat across modules; real ones never do)."""

import pytest
import redis
from replica_testing import with_db

from stages import streams


@pytest.fixture(scope="module")
def redis_url(redis_service) -> str:
    return with_db(redis_service)


@pytest.fixture(scope="module")
def client(redis_url):
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    client.delete(streams.aborted_requests())  # an earlier run's, too
    yield client
    client.delete(streams.orchestrator_inbox(), streams.aborted_requests())
