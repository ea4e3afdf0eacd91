"""A restarted replica host takes over what its dead predecessor left pending, also after its
machine restarted: the predecessor's pid may then belong to another process."""

from __future__ import annotations

import os
import socket
import time

import pytest
import redis
from replica_testing import unique, with_db

from stages import streams
from stages.protocol import Abort, encode
from workers.replica_input import ReplicaInput

HERE = socket.gethostname()


@pytest.fixture
def client(redis_service):
    client = redis.Redis.from_url(with_db(redis_service), socket_timeout=5)
    yield client
    client.close()


def left_pending(client, replica_id: str, consumer: str) -> None:
    """An input entry the consumer read and never acknowledged."""
    before = ReplicaInput(client, replica_id, consumer=consumer)
    before.ensure_group()
    client.xadd(streams.replica_input(replica_id), {"kind": "abort", "data": encode(Abort(request_id="r1"))})
    assert len(before.read(block_ms=None)) == 1


def test_a_consumer_whose_pid_is_now_another_process_is_taken_over_once_idle(client):
    replica_id = unique("replica")
    recycled = f"{HERE}:{os.getpid()}"  # alive, but no replica host of this replica
    left_pending(client, replica_id, recycled)
    successor = ReplicaInput(client, replica_id, consumer=f"{HERE}:0")
    try:
        assert successor.claim_from_dead_consumers(stale_after_ms=60_000) == []  # read just now: maybe alive
        time.sleep(0.2)
        claimed = successor.claim_from_dead_consumers(stale_after_ms=100)
        assert len(claimed) == 1
        names = [consumer["name"].decode() for consumer in client.xinfo_consumers(successor.stream, successor.group)]
        assert recycled not in names
    finally:
        client.delete(successor.stream)


def test_entries_pending_under_the_new_hosts_own_name_are_taken_over(client):
    replica_id = unique("replica")
    same_name = f"{HERE}:{os.getpid()}"  # the host before had this pid too
    left_pending(client, replica_id, same_name)
    successor = ReplicaInput(client, replica_id, consumer=same_name)
    try:
        claimed = successor.claim_from_dead_consumers(stale_after_ms=60_000)
        assert len(claimed) == 1
        assert successor.read(block_ms=None) == []  # not delivered twice
    finally:
        client.delete(successor.stream)
