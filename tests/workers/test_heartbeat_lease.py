"""A replica host's heartbeat is a lease: cut off from Redis longer than the lease, it finds its key
expired and stops (the control plane gave it up); a key that Redis lost by restarting, or that
expired while the process was starved of CPU, is written back."""

from __future__ import annotations

import time

import pytest
import redis
from replica_testing import unique, with_db

from stages.heartbeat import Heartbeat


@pytest.fixture
def client(redis_service):
    client = redis.Redis.from_url(with_db(redis_service), socket_timeout=5)
    yield client
    client.close()


def lease(client, lost: list) -> Heartbeat:
    return Heartbeat(client, unique("lease"), ttl_s=0.1, lease_after_s=2.0, on_lost=lambda: lost.append(True))


class CutOff:
    """A Redis client whose writes fail, as across a network partition."""

    def set(self, *args, **kwargs):
        raise redis.ConnectionError("partitioned")


def test_a_key_that_expired_while_cut_off_longer_than_the_lease_is_not_written_back(client):
    lost: list = []
    beat = lease(client, lost)
    beat.beat()
    beat.client = CutOff()
    with pytest.raises(redis.ConnectionError):
        beat.beat()
    time.sleep(2.2)  # no beat got through for longer than the lease: the key expired
    beat.client = client
    beat.beat()
    assert beat.lost.is_set() and lost == [True]
    assert not client.exists(beat.key)
    beat.beat()
    assert not client.exists(beat.key)  # it stays given up
    beat.beat(force=True)  # its last word (an ERROR status) still gets out
    assert client.exists(beat.key)
    client.delete(beat.key)


def test_a_starved_process_or_a_redis_restart_writes_the_key_back(client):
    lost: list = []
    beat = lease(client, lost)
    beat.beat()
    time.sleep(2.2)  # expired: no beat ran at all (starved of CPU), none failed
    beat.beat()
    assert client.exists(beat.key) and not lost

    beat._run_id = "a-redis-that-restarted-since"  # noqa: SLF001 - as if Redis lost every key by restarting
    beat.client = CutOff()
    with pytest.raises(redis.ConnectionError):
        beat.beat()
    client.delete(beat.key)
    time.sleep(2.2)
    beat.client = client
    beat.beat()
    assert client.exists(beat.key) and not lost
    client.delete(beat.key)
