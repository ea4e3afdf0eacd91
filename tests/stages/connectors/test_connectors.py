"""Connectors: inline, shared memory (across processes) and Redis (a real server), chosen by size and locality."""

from __future__ import annotations

import multiprocessing
import os
import time

import numpy as np
import pytest
import redis
from procs import unavailable

from stages.connectors import (
    Connectors,
    InlineConnector,
    RedisConnector,
    SharedMemoryConnector,
    choose_connector,
    resolve,
    sweep,
)
from stages.connectors.shared_memory import SHM_DIR
from stages.errors import StageFailure
from stages.protocol import PayloadRef, Tensor
from stages.tensors import to_numpy, to_wire


@pytest.fixture
def redis_client(redis_service):
    client = redis.Redis.from_url(os.environ.get("REDIS_URL") or redis_service, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.RedisError as error:
        unavailable(f"no Redis reachable: {error}")
    yield client
    client.close()


def test_choice_by_size_locality_and_preference():
    assert choose_connector(100, same_host=True) == "inline"
    assert choose_connector(10_000_000, same_host=True) == "shm"
    assert choose_connector(10_000_000, same_host=False) == "redis"
    assert choose_connector(100, same_host=False, preference="redis") == "redis"
    assert choose_connector(10_000_000, same_host=True, preference="inline") == "inline"
    assert choose_connector(10, same_host=False, preference="shm") == "redis"  # shm cannot cross hosts


def test_inline_round_trip():
    tensor = to_wire(np.arange(6, dtype=np.int64).reshape(2, 3))
    assert InlineConnector().get(InlineConnector().put(tensor)) is tensor


def test_shared_memory_round_trip_is_consumed_once():
    connector = SharedMemoryConnector()
    array = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    ref = connector.put(to_wire(array))
    assert isinstance(ref, PayloadRef) and ref.connector == "shm" and ref.nbytes == array.nbytes
    np.testing.assert_array_equal(to_numpy(connector.get(ref)), array)
    assert not (SHM_DIR / ref.key).exists()
    with pytest.raises(StageFailure, match="gone"):
        connector.get(ref)


def _put_in_child(queue):
    ref = SharedMemoryConnector().put(to_wire(np.full((1000,), 7, dtype=np.int16)))
    queue.put(ref.key)


def test_shared_memory_outlives_the_sending_process():
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_put_in_child, args=(queue,))
    child.start()
    key = queue.get(timeout=60)
    child.join(timeout=60)
    ref = PayloadRef(connector="shm", key=key, nbytes=2000, dtype="int16", shape=[1000])
    assert (resolve(ref) == 7).all()


def test_sweep_removes_orphaned_segments():
    ref = SharedMemoryConnector().put(to_wire(np.zeros(10, dtype=np.float32)))
    os.utime(SHM_DIR / ref.key, (time.time() - 3600, time.time() - 3600))
    assert sweep(max_age_s=600) >= 1
    assert not (SHM_DIR / ref.key).exists()


def test_bfloat16_travels_through_shared_memory():
    torch = pytest.importorskip("torch")
    from stages.tensors import from_wire

    original = torch.randn(4, 8).to(torch.bfloat16)
    connector = SharedMemoryConnector()
    back = from_wire(connector.get(connector.put(to_wire(original))))
    assert back.dtype == torch.bfloat16 and torch.equal(back, original)


def test_redis_round_trip_with_ttl(redis_client):
    connector = RedisConnector(redis_client, ttl_s=30)
    array = np.arange(40_000, dtype=np.float32).reshape(200, 200)
    ref = connector.put(to_wire(array))
    assert ref.connector == "redis" and 0 < redis_client.pttl(ref.key) <= 30_000
    np.testing.assert_array_equal(to_numpy(connector.get(ref)), array)
    assert redis_client.exists(ref.key) == 0
    with pytest.raises(StageFailure, match="gone"):
        connector.get(ref)


def test_redis_payload_expires(redis_client):
    connector = RedisConnector(redis_client, ttl_s=0.05)
    ref = connector.put(Tensor(dtype="uint8", shape=[3], data=b"abc"))
    time.sleep(0.2)
    with pytest.raises(StageFailure, match="TTL"):
        connector.get(ref)


def test_connectors_choose_per_payload_and_record_transfers(redis_client):
    connectors = Connectors(redis_client=redis_client, inline_max_bytes=1024)
    small = np.ones(16, dtype=np.float32)
    large = np.ones((256, 256), dtype=np.float32)
    inline = connectors.put(small)
    local = connectors.put(large, same_host=True)
    remote = connectors.put(large, same_host=False)
    assert isinstance(inline, Tensor)
    assert (local.connector, remote.connector) == ("shm", "redis")
    for handle, expected in ((inline, small), (local, large), (remote, large)):
        np.testing.assert_array_equal(resolve(handle, connectors), expected)
    stats = connectors.stats()
    assert stats["shm.put"]["bytes"] == large.nbytes and stats["redis.get"]["count"] == 1
    assert all(record.seconds >= 0 for record in connectors.transfers)


def test_redis_handles_need_a_client():
    ref = PayloadRef(connector="redis", key="x", nbytes=1, dtype="uint8", shape=[1])
    with pytest.raises(StageFailure, match="Redis needs a client"):
        Connectors().get(ref)


def test_messages_offload_large_payloads_and_load_them_back(redis_client):
    from stages.protocol import StageOutput, StageRequest

    connectors = Connectors(redis_client=redis_client, inline_max_bytes=1024)
    hidden = to_wire(np.ones((64, 64), dtype=np.float32))
    small = to_wire(np.ones(4, dtype=np.float32))
    output = StageOutput(request_id="r", payloads={"hidden": hidden, "small": small})
    sent = connectors.offload_output(output, same_host=False)
    assert sent.payloads["hidden"].connector == "redis" and sent.payloads["small"] is small
    request = StageRequest(
        request_id="r", stage_id=1, payloads=sent.payloads, inputs_embeds=connectors.put(hidden, same_host=True)
    )
    received = connectors.load_request(request)
    assert received.payloads["hidden"] == hidden and received.inputs_embeds == hidden
