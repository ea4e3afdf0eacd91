"""A deployment's load per stage right now, from what its replicas report: the queue depth the
reconciler copies onto each replica row, and the numbers of the replica hosts' live heartbeats
(`running`: the requests in the engine, its batch). Measures a heartbeat does not carry are left out.
"""

from __future__ import annotations

import redis

from control_plane.deployments.heartbeats import replica_statuses
from control_plane.deployments.models import Deployment

HEARTBEAT_MEASURES = ("running", "batch_size")
"""Heartbeat fields summed per stage when the replica hosts report them."""


def stage_load(*, deployment: Deployment) -> dict[str, dict[str, float]]:
    """Stage (or stage group) label -> measure -> the sum over its replicas."""
    replicas = list(deployment.replicas.all())
    try:
        statuses = replica_statuses([str(replica.id) for replica in replicas])
    except redis.RedisError:  # Redis down: the rows' numbers still stand
        statuses = {}
    load: dict[str, dict[str, float]] = {}
    for replica in replicas:
        stage = load.setdefault(replica.label, {"queue_depth": 0})
        stage["queue_depth"] += replica.queue_depth
        status = statuses.get(str(replica.id))
        for measure in HEARTBEAT_MEASURES:
            value = getattr(status, measure, None)
            if isinstance(value, int | float):
                stage[measure] = stage.get(measure, 0) + value
    return load
