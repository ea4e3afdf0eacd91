"""Each Celery worker announces the pools (queues) it serves and the devices it has, with each
device's memory and utilisation as far as it can read them without torch (the machine's memory
for `cpu`, NVML for GPUs when `pynvml` is importable), and sweeps the shared-memory payloads
nobody collected on its host."""

from __future__ import annotations

import os
import socket

import msgspec
import redis
from celery.signals import worker_ready, worker_shutdown

from stages import streams
from stages.heartbeat import Heartbeat
from workers.device_usage import device_usage
from workers.shm_sweeper import ShmSweeper

_heartbeats: list[Heartbeat] = []
_sweepers: list[ShmSweeper] = []


def redis_url() -> str:
    url = os.environ.get("REDIS_URL")
    if not url:
        raise RuntimeError("REDIS_URL is not set for the worker (the supervisor or compose file sets it)")
    return url


def local_devices() -> list[str]:
    """'cpu' plus one 'cuda:N' per visible GPU (without importing torch: it is slow and forks badly)."""
    devices = ["cpu"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    else:
        count = len([n for n in os.listdir("/dev") if n.startswith("nvidia") and n[6:].isdigit()])
    devices += [f"cuda:{index}" for index in range(count)]
    return devices


def devices_usage(devices: list[str]) -> list[dict]:
    """Memory (and utilisation) of each device, as `stages.replica_stats.DeviceUsage` dicts."""
    return [msgspec.to_builtins(device_usage(device)) for device in devices]


@worker_ready.connect
def start_pool_heartbeats(sender, **kwargs) -> None:
    hostname = getattr(sender, "hostname", None) or socket.gethostname()
    pools = sorted(queue.name for queue in sender.app.amqp.queues.consume_from.values())
    client = redis.Redis.from_url(redis_url(), socket_timeout=2)
    interval = float(os.environ.get("OMNISTAGE_HEARTBEAT_INTERVAL", "2"))
    ttl = float(os.environ.get("OMNISTAGE_HEARTBEAT_TTL", "10"))
    devices = local_devices()
    for pool in pools:
        payload = {"pool": pool, "hostname": hostname, "host": socket.gethostname(), "pid": os.getpid(),
                   "devices": devices}  # fmt: skip
        beat = Heartbeat(
            client,
            streams.pool_heartbeat(pool, hostname),
            interval_s=interval,
            ttl_s=ttl,
            payload=lambda payload=payload: {**payload, "usage": devices_usage(payload["devices"])},
        )
        beat.beat()
        _heartbeats.append(beat.start())
    _sweepers.append(ShmSweeper().start())


@worker_shutdown.connect
def stop_pool_heartbeats(**kwargs) -> None:
    while _heartbeats:
        _heartbeats.pop().stop()
    while _sweepers:
        _sweepers.pop().stop()
