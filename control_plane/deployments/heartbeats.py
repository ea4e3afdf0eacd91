"""What the replica hosts and worker pools report through Redis heartbeat keys."""

from __future__ import annotations

import json

import msgspec

from control_plane.redis_client import get_redis
from stages import streams
from stages.protocol import ReplicaStatus


def replica_statuses(replica_ids: list[str]) -> dict[str, ReplicaStatus]:
    if not replica_ids:
        return {}
    values = get_redis().mget([streams.replica_heartbeat(rid) for rid in replica_ids])
    statuses = {}
    for replica_id, raw in zip(replica_ids, values, strict=True):
        if raw:
            try:
                statuses[replica_id] = msgspec.json.decode(raw, type=ReplicaStatus)
            except msgspec.DecodeError:
                continue
    return statuses


def live_pools() -> dict[str, list[dict]]:
    """Pool name -> heartbeats of the workers serving it."""
    client = get_redis()
    pools: dict[str, list[dict]] = {}
    for key in client.scan_iter(match=streams.pool_heartbeat_pattern(), count=200):
        raw = client.get(key)
        if not raw:
            continue
        beat = json.loads(raw)
        pools.setdefault(beat.get("pool", "?"), []).append(beat)
    return pools


def live_devices() -> set[str]:
    return {device for beats in live_pools().values() for beat in beats for device in beat.get("devices", [])}
