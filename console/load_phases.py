"""What a loading replica is doing, read live from its heartbeat for the deployment page: the
loading phase its host names (imports, weights) and its progress, fresher than the row's."""

from __future__ import annotations

import redis

from control_plane.deployments.heartbeats import replica_statuses
from control_plane.deployments.models import DeploymentState


def with_load_phases(replicas) -> None:
    """Sets `load_phase` on each replica (empty unless it is loading) and, for a loading one with a
    live heartbeat, its `progress`."""
    replicas = list(replicas)
    for replica in replicas:
        replica.load_phase = ""
    loading = [replica for replica in replicas if replica.state == DeploymentState.LOADING]
    if not loading:
        return
    try:
        statuses = replica_statuses([str(replica.id) for replica in loading])
    except redis.RedisError:
        return
    for replica in loading:
        status = statuses.get(str(replica.id))
        if status is not None and status.state == "LOADING":
            replica.load_phase = status.phase
            replica.progress = max(replica.progress, status.progress)
