"""Replica hosts publish their recent log lines to a capped Redis stream (workers/log_stream.py)."""

from __future__ import annotations

import logging
import os

import pytest
import redis
from procs import wait_for
from replica_testing import echo_spec, forget, start_host, unique, wait_state, with_db

from stages import streams
from workers.log_stream import MAX_LINES, RedisLogStream, mask_api_keys

pytestmark = pytest.mark.timeout(120)

KEY = "omni-1a2b3c4d-" + "S3cr3t_-" * 5


@pytest.fixture(scope="module")
def redis_url(redis_service) -> str:
    return with_db(redis_service)


@pytest.fixture(scope="module")
def client(redis_url):
    return redis.Redis.from_url(redis_url, socket_timeout=5)


@pytest.fixture
def stream_logger(client):
    """A logger of its own whose lines go to a fresh stream through the handler."""
    key = unique("test:logs")
    handler = RedisLogStream(client, key)
    handler.start()
    logger = logging.getLogger(unique("log-stream-test"))
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield logger, handler, key
    logger.removeHandler(handler)
    handler.close()
    client.delete(key)


def lines(client, key: str) -> list[str]:
    return [fields[b"line"].decode() for _, fields in client.xrange(key)]


def test_lines_are_formatted_and_keys_masked(client, stream_logger):
    logger, handler, key = stream_logger
    logger.info("loaded in %.1f s", 1.25)
    logger.warning("a client sent %s", KEY)
    handler.close()  # writes what is queued
    first, second = lines(client, key)
    assert first.endswith(f" INFO pid {os.getpid()} {logger.name}: loaded in 1.2 s")
    assert second.endswith("a client sent omni-1a2b3c4d-[redacted]") and "S3cr3t" not in second
    assert 0 < client.ttl(key) <= 24 * 3600


def test_the_stream_stays_capped(client, stream_logger):
    logger, handler, key = stream_logger
    for index in range(5 * MAX_LINES):
        logger.info("line %d", index)
    handler.close()
    kept = lines(client, key)
    # approximate trimming removes whole nodes (100 entries by default): about MAX_LINES stay
    assert MAX_LINES <= len(kept) <= MAX_LINES + 100
    assert kept[-1].endswith(f"line {5 * MAX_LINES - 1}")


def test_logging_goes_on_when_redis_is_gone(tmp_path):
    gone = redis.Redis(unix_socket_path=str(tmp_path / "nothing.sock"), socket_timeout=0.5)
    handler = RedisLogStream(gone, "test:logs:gone")
    handler.start()
    logger = logging.getLogger(unique("log-stream-gone"))
    logger.propagate = False
    logger.addHandler(handler)
    logger.warning("nobody hears this")  # returns at once; the writer thread gives the line up
    wait_for(lambda: handler.dropped == 1, timeout=30, what="the line to be dropped")
    handler.close()


def test_mask_api_keys_keeps_other_text():
    assert mask_api_keys("deployment omni-demo ready") == "deployment omni-demo ready"
    assert mask_api_keys(f"Bearer {KEY}.") == "Bearer omni-1a2b3c4d-[redacted]."


def test_a_replica_host_publishes_what_it_logs(client, redis_url, tmp_path):
    replica_id, deployment_id = unique("replica"), unique("deployment")
    host = start_host(echo_spec(replica_id, deployment_id), redis_url, tmp_path / "host.log")
    try:
        wait_state(client, replica_id, "READY")
        key = streams.replica_logs(replica_id)
        ready = f"workers.replica_status: replica {replica_id}: READY"
        wait_for(lambda: any(line.endswith(ready) for line in lines(client, key)), timeout=10, what="the READY line")
        assert host.stop() == 0
        assert lines(client, key)[-1].endswith(f"replica {replica_id}: exiting with code 0")  # written at exit
    finally:
        host.stop()
        forget(client, replica_id, deployment_id)
        client.delete(streams.replica_logs(replica_id))
