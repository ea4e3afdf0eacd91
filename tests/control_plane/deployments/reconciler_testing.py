"""Helpers for driving the reconciler in-process against the test database and the real
Redis: deployments whose replicas sit on a private Celery queue (no worker takes their
tasks, and the test reads what was sent), and heartbeats written as a replica host would."""

from __future__ import annotations

import json
import socket
import time
import uuid

import msgspec

from control_plane.deployments.models import Deployment, Pipeline, Replica
from control_plane.deployments.services import deployment_create
from control_plane.redis_client import get_redis
from stages import streams
from stages.protocol import ReplicaStatus


class Lifecycle:
    """One test's deployments, heartbeats and the lifecycle tasks the reconciler sent them."""

    def __init__(self):
        self.redis = get_redis()
        self.pool = f"test-lifecycle-{uuid.uuid4().hex[:8]}"
        self.beats: list[str] = []

    def deploy(self, name: str, pipeline: str = "echo") -> Deployment:
        deployment = deployment_create(
            name=name, pipeline=Pipeline.objects.get(name=pipeline), model_dir="-", deploy_config={}
        )
        Replica.objects.filter(deployment=deployment).update(pool=self.pool)  # a queue no worker reads
        return deployment

    def beat(self, replica: Replica, state: str = "READY", error: str | None = None, permanent: bool = False) -> None:
        status = ReplicaStatus(
            replica_id=str(replica.id),
            deployment_id=str(replica.deployment_id),
            stage=replica.stage,
            state=state,
            host=socket.gethostname(),
            pid=0,
            error=error,
            permanent=permanent,
            ts=time.time(),
        )
        key = streams.replica_heartbeat(str(replica.id))
        self.redis.set(key, msgspec.json.encode(status), px=60_000)
        self.beats.append(key)

    def silence(self, replica: Replica) -> None:
        """The host stopped heart-beating."""
        self.redis.delete(streams.replica_heartbeat(str(replica.id)))

    def tasks_sent(self) -> list[str]:
        """Names of the Celery tasks sent to this test's queue, oldest first."""
        messages = self.redis.lrange(self.pool, 0, -1)
        return [json.loads(message)["headers"]["task"] for message in reversed(messages)]

    def close(self) -> None:
        self.redis.delete(self.pool, f"_kombu.binding.{self.pool}", *self.beats)
        self.redis.close()


def state_of(row) -> str:
    row.refresh_from_db()
    return row.state
