"""Devices as the heartbeats describe them: every worker pool, the hosts serving it, their
devices with memory and utilisation, and the replicas placed on each (the console's Devices page,
the device series of /metrics).

A device's reading comes from its worker's pool heartbeat (machine memory; GPUs through NVML
where the worker has it) and is completed by the live replicas on it (a replica on a GPU reads
the driver through torch). For cpu the utilisation is the replica hosts' CPU use added up, as a
share of the machine's cores; for a GPU it is NVML's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
import redis

from control_plane.deployments.heartbeats import live_pools, replica_statuses
from control_plane.deployments.models import Replica
from stages.protocol import ReplicaStatus
from stages.replica_stats import DeviceUsage


@dataclass
class PlacedReplica:
    replica: Replica
    status: ReplicaStatus | None
    process_bytes: int | None = None


@dataclass
class DeviceRow:
    device: str
    reading: DeviceUsage
    replicas: list[PlacedReplica] = field(default_factory=list)

    @property
    def memory_share(self) -> float | None:
        used, total = self.reading.memory_used_bytes, self.reading.memory_total_bytes
        return used / total if used is not None and total else None


@dataclass
class HostRow:
    host: str
    workers: list[str] = field(default_factory=list)
    devices: dict[str, DeviceRow] = field(default_factory=dict)


@dataclass
class PoolRow:
    pool: str
    hosts: dict[str, HostRow] = field(default_factory=dict)
    unplaced: list[Replica] = field(default_factory=list)
    """Replicas of this pool no live host serves now (pending, failed, stopped)."""


def device_readings(statuses: list[ReplicaStatus], pools: dict[str, list[dict]]) -> dict[tuple[str, str], DeviceUsage]:
    """(host, device) -> the device's reading, from the pool heartbeats completed by the replicas'."""
    readings: dict[tuple[str, str], DeviceUsage] = {}
    for beats in pools.values():
        for beat in beats:
            host = beat_host(beat)
            for raw in beat.get("usage") or []:
                try:
                    usage = msgspec.convert(raw, DeviceUsage)
                except msgspec.ValidationError:
                    continue
                usage.process_bytes = None  # the worker's own memory is no device's reading
                usage.utilization = None if usage.device == "cpu" else usage.utilization
                readings[(host, usage.device)] = usage
    cpu_share: dict[tuple[str, str], float] = {}
    for status in statuses:
        usage = status.device_usage
        if usage is None:
            continue
        key = (status.host, usage.device)
        reading = readings.setdefault(key, DeviceUsage(device=usage.device))
        if usage.memory_total_bytes is not None:
            reading.memory_used_bytes, reading.memory_total_bytes = usage.memory_used_bytes, usage.memory_total_bytes
        if usage.utilization is None:
            continue
        if usage.device == "cpu":
            cpu_share[key] = cpu_share.get(key, 0.0) + usage.utilization
        else:
            reading.utilization = usage.utilization
    for key, share in cpu_share.items():
        readings[key].utilization = min(share, 1.0)
    return readings


def beat_host(beat: dict) -> str:
    """The machine a pool heartbeat comes from (older workers sent only Celery's `name@host`)."""
    return beat.get("host") or str(beat.get("hostname", "?")).rpartition("@")[2]


def device_inventory() -> list[PoolRow] | None:
    """Every pool with its hosts, devices and replicas; None when Redis cannot be read."""
    replicas = list(Replica.objects.select_related("deployment").order_by("deployment__name", "stage_id", "index"))
    try:
        pools = live_pools()
        statuses = replica_statuses([str(replica.id) for replica in replicas])
    except redis.RedisError:
        return None
    readings = device_readings(list(statuses.values()), pools)
    rows: dict[str, PoolRow] = {}
    for pool, beats in pools.items():
        row = rows.setdefault(pool, PoolRow(pool))
        for beat in beats:
            host = row.hosts.setdefault(beat_host(beat), HostRow(beat_host(beat)))
            host.workers.append(str(beat.get("hostname", "")))
            for device in beat.get("devices") or []:
                _device(host, device, readings)
    for replica in replicas:
        status = statuses.get(str(replica.id))
        row = rows.setdefault(replica.pool, PoolRow(replica.pool))
        if status is None or not status.host:
            row.unplaced.append(replica)
            continue
        host = row.hosts.setdefault(status.host, HostRow(status.host))
        usage = status.device_usage
        device = _device(host, usage.device if usage else status.device, readings)
        device.replicas.append(PlacedReplica(replica, status, usage.process_bytes if usage else None))
    return [rows[name] for name in sorted(rows)]


def _device(host: HostRow, device: str, readings: dict) -> DeviceRow:
    if device not in host.devices:
        host.devices[device] = DeviceRow(device, readings.get((host.host, device)) or DeviceUsage(device=device))
    return host.devices[device]
