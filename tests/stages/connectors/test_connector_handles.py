"""Shared-memory handles on the platform path: they name their host and writer, readers free
them, a reader on another host goes through its writer's export to Redis, writers release
what nobody will read; and the locality rule behind the choice."""

from __future__ import annotations

import numpy as np
import pytest
import redis

from stages import streams
from stages.connectors import Connectors, owned_segments, reader_is_local
from stages.connectors.shared_memory import SHM_DIR
from stages.errors import StageFailure
from stages.protocol import PayloadRef, Tensor
from stages.tensors import to_wire

LARGE = to_wire(np.arange(64 * 1024, dtype=np.float32))


@pytest.fixture
def redis_client(redis_service):
    client = redis.Redis.from_url(redis_service)
    yield client
    client.close()


@pytest.fixture
def writer(redis_client, request):
    connectors = Connectors(redis_client=redis_client, host="host-a", owner=f"writer-{request.node.name[-20:]}")
    yield connectors
    for path in owned_segments(connectors.owner):
        path.unlink()


def test_a_reader_is_local_when_a_replica_of_its_stage_runs_here():
    assert reader_is_local(["host-a", "host-a"], "host-a")
    assert reader_is_local(["host-a", "host-b"], "host-a")  # the orchestrator places it on host-a
    assert not reader_is_local(["host-b"], "host-a")
    assert not reader_is_local([], "host-a")  # none live: the one that comes up may be anywhere
    assert not reader_is_local(["host-a"], "")


def test_offload_chooses_per_payload_key(redis_client):
    connectors = Connectors(redis_client=redis_client, owner="per-key")
    payloads = {"hidden": LARGE, "audio": LARGE, "small": to_wire(np.ones(4, dtype=np.float32))}
    try:
        sent = connectors.offload(payloads, same_host=lambda key: key == "hidden")
        assert sent["hidden"].connector == "shm" and sent["audio"].connector == "redis"
        assert isinstance(sent["small"], Tensor)
    finally:
        for path in owned_segments("per-key"):
            path.unlink()


def test_handles_name_their_host_and_writer_and_an_at_least_once_reader_frees_them(writer):
    handle = writer.put(LARGE, same_host=True)
    assert (handle.connector, handle.host, handle.owner) == ("shm", "host-a", writer.owner)
    assert owned_segments(writer.owner) == [SHM_DIR / handle.key]

    reader = Connectors(host="host-a", shm_consume=False)
    assert reader.get(handle) == LARGE and reader.get(handle) == LARGE  # a redelivery reads it again
    reader.free(handle)
    assert owned_segments(writer.owner) == []
    assert reader.stats()["shm.get"]["count"] == 2 and reader.stats()["shm.free"]["bytes"] == LARGE.nbytes
    assert writer.stats()["shm.put"] == {"count": 1, "bytes": LARGE.nbytes, "seconds": pytest.approx(0, abs=5)}


def test_a_handle_from_another_host_goes_to_the_foreign_fetcher(writer):
    handle = writer.put(LARGE, same_host=True)
    asked: list[PayloadRef] = []

    def fetch(payload: PayloadRef) -> Tensor:
        asked.append(payload)
        return LARGE

    reader = Connectors(host="host-b", fetch_foreign=fetch)
    assert reader.get(handle) == LARGE and asked == [handle]
    assert reader.stats()["shm.fallback"]["count"] == 1
    assert owned_segments(writer.owner) == [SHM_DIR / handle.key]  # not touched from the wrong host
    with pytest.raises(StageFailure, match="on host 'host-a'"):
        Connectors(host="host-b").get(handle)


def test_export_copies_a_writers_segment_into_redis_for_a_foreign_reader_which_frees_the_copy(writer, redis_client):
    handle = writer.put(LARGE, same_host=True)
    foreign = Connectors(redis_client=redis_client, owner="someone-else").put(LARGE, same_host=True)
    try:
        assert writer.export_segments([handle, foreign]) == 1  # only its own segments
        copy = streams.payload(handle.key)
        assert redis_client.get(copy) == LARGE.data and 0 < redis_client.pttl(copy) <= writer.redis_ttl_s * 1000
        assert owned_segments(writer.owner) == [] and owned_segments("someone-else")
        assert writer.stats()["shm.export"]["bytes"] == LARGE.nbytes

        Connectors(redis_client=redis_client, host="host-b").free(handle)
        assert not redis_client.exists(copy)
    finally:
        for path in owned_segments("someone-else"):
            path.unlink()


def test_a_release_frees_only_the_writers_own_segments(writer):
    own = writer.put(LARGE, same_host=True)
    other = Connectors(owner="bystander").put(LARGE, same_host=True)
    try:
        writer.free_segments([own.key, other.key, "omnistage_../../etc"])
        assert owned_segments(writer.owner) == [] and owned_segments("bystander") == [SHM_DIR / other.key]
    finally:
        for path in owned_segments("bystander"):
            path.unlink()
