"""What a loading replica is doing, read live from its heartbeat for the deployment page: the
loading phase its host names (imports, weights), its progress, fresher than the row's, and while its
weights load the bytes read of their total ("1.2 of 14.8 GiB")."""

from __future__ import annotations

import redis

from control_plane.deployments.heartbeats import replica_statuses
from control_plane.deployments.models import DeploymentState

UNITS = ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def with_load_phases(replicas) -> None:
    """Sets `load_phase` and `load_bytes` on each replica (empty unless it is loading) and, for a loading
    one with a live heartbeat, its `progress`: the weights' loaded / total while they load."""
    replicas = list(replicas)
    for replica in replicas:
        replica.load_phase = ""
        replica.load_bytes = ""
    loading = [replica for replica in replicas if replica.state == DeploymentState.LOADING]
    if not loading:
        return
    try:
        statuses = replica_statuses([str(replica.id) for replica in loading])
    except redis.RedisError:
        return
    for replica in loading:
        status = statuses.get(str(replica.id))
        if status is None or status.state != "LOADING":
            continue
        replica.load_phase = status.phase
        loaded, total = status.weights_loaded_bytes, status.weights_total_bytes
        if loaded is not None and total:
            replica.load_bytes = bytes_of_total(loaded, total)
            replica.progress = status.progress
        else:
            replica.progress = max(replica.progress, status.progress)


def bytes_of_total(loaded: int, total: int) -> str:
    """ "1.2 of 14.8 GiB": both in the total's unit."""
    size, unit = next(((size, unit) for size, unit in UNITS if total >= size), (1, "B"))
    if size == 1:
        return f"{loaded} of {total} B"
    return f"{loaded / size:.1f} of {total / size:.1f} {unit}"
