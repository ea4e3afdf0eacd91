"""Celery tasks of the worker pools: the replica lifecycle and a ping.

The control plane sends them by name (`app.send_task("workers.start_replica", [spec],
queue=pool)`) and never imports this module. Every task is idempotent, keyed by replica
id, and returns within seconds: the replica host they start is a separate process, so no
task lasts as long as a replica (the broker's visibility timeout must outlast every task).
"""

from __future__ import annotations

import functools

import msgspec
import redis
from celery import shared_task
from celery.utils.log import get_task_logger

from stages import streams
from stages.protocol import Drain, ReplicaSpec, encode
from workers import pool_heartbeat, worker_main  # noqa: F401 - connect the worker's signal handlers
from workers.replica_launcher import launch_replica_host
from workers.replica_status import read_status, serving_host

log = get_task_logger(__name__)

_REDIS_ERRORS = (redis.ConnectionError, redis.TimeoutError)


@functools.cache
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)


@shared_task(name="workers.ping")
def ping() -> str:
    return "pong"


@shared_task(
    name="workers.start_replica", autoretry_for=_REDIS_ERRORS, max_retries=3, retry_backoff=1, retry_jitter=False
)
def start_replica(spec: dict) -> dict:
    """Start the replica host for `spec` (a ReplicaSpec as builtins) unless it runs already."""
    try:
        replica = msgspec.convert(spec, ReplicaSpec)
    except msgspec.ValidationError as error:
        log.error("start_replica: invalid spec for replica %s: %s", spec.get("replica_id", "?"), error)
        return {"replica_id": spec.get("replica_id"), "started": False, "reason": f"invalid spec: {error}"}
    url = pool_heartbeat.redis_url()
    launch = launch_replica_host(replica, url, _client(url), worker_main.worker_main_pid())
    if launch.started:
        log.info("replica %s: started host pid %d (stage %s)", replica.replica_id, launch.pid, replica.stage)
    else:
        log.info("replica %s: not started: %s", replica.replica_id, launch.reason)
    return {"replica_id": replica.replica_id, "started": launch.started, "pid": launch.pid, "reason": launch.reason}


@shared_task(
    name="workers.stop_replica", autoretry_for=_REDIS_ERRORS, max_retries=3, retry_backoff=1, retry_jitter=False
)
def stop_replica(replica_id: str) -> dict:
    """Tell the replica's host to drain: finish its requests, then exit. Any worker may run this."""
    client = _client(pool_heartbeat.redis_url())
    entry_id = client.xadd(streams.replica_input(replica_id), {"kind": "drain", "data": encode(Drain())})
    owner = serving_host(read_status(client, replica_id), replica_id)
    log.info("replica %s: drain sent (%s)", replica_id, f"served by {owner}" if owner else "no live host")
    return {"replica_id": replica_id, "entry": entry_id.decode(), "served_by": owner}
