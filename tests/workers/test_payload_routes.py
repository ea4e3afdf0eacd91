"""Which output payloads may stay in shared memory: those only the next stage reads, while
a live replica of that stage runs on this host (as the heartbeats in Redis say)."""

from __future__ import annotations

import socket

import msgspec
import pytest
import redis
from replica_testing import unique, with_db

from stages import streams
from stages.config import StageDeployConfig
from stages.echo import family as echo_family
from stages.protocol import ReplicaSpec, ReplicaStatus
from workers.payload_routes import PayloadRoutes

HERE = socket.gethostname()


@pytest.fixture
def client(redis_service):
    client = redis.Redis.from_url(with_db(redis_service), socket_timeout=5)
    yield client
    client.close()


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def spec(variant: str, stage: str, deployment: str) -> ReplicaSpec:
    pipeline = echo_family.pipeline_named(variant)
    return ReplicaSpec(
        replica_id=unique("writer"),
        deployment_id=deployment,
        family="echo",
        pipeline=pipeline,
        stage=stage,
        stage_id=pipeline.stage_named(stage).id,
        model_dir="-",
        stage_deploy=StageDeployConfig(),
    )


def announce(client, deployment: str, stage: str, host: str = HERE, state: str = "READY") -> str:
    """A replica host of `stage` as it lists itself and beats."""
    replica_id = unique(stage)
    client.hset(streams.deployment_replicas(deployment), replica_id, stage)
    status = ReplicaStatus(replica_id=replica_id, deployment_id=deployment, stage=stage, state=state, host=host)
    client.set(streams.replica_heartbeat(replica_id), msgspec.json.encode(status), px=30_000)
    return replica_id


@pytest.fixture
def deployment(client):
    deployment_id = unique("deployment")
    yield deployment_id
    for replica_id in client.hkeys(streams.deployment_replicas(deployment_id)):
        client.delete(streams.replica_heartbeat(replica_id.decode()))
    client.delete(streams.deployment_replicas(deployment_id))


def test_payloads_stay_only_while_a_live_reader_runs_here(client, deployment):
    clock = Clock()
    routes = PayloadRoutes(client, spec("chain", "echo", deployment), HERE, refresh_s=1.0, clock=clock)
    assert not routes.stays_on_host("hidden")  # no reader is up: the one that comes may be anywhere

    announce(client, deployment, "echo2", host="gpu-node-7")
    announce(client, deployment, "echo")  # the writer's own stage is no reader
    clock.now += 1.0
    assert not routes.stays_on_host("hidden")  # its only reader is on another host

    local = announce(client, deployment, "echo2")
    assert not routes.stays_on_host("hidden")  # cached until the refresh
    clock.now += 1.0
    assert routes.stays_on_host("hidden") and routes.stays_on_host("hidden#3")

    client.delete(streams.replica_heartbeat(local))
    clock.now += 1.0
    assert not routes.stays_on_host("hidden")


def test_a_reader_that_died_silently_is_dropped_from_the_index(client, deployment):
    routes = PayloadRoutes(client, spec("chain", "echo", deployment), HERE, refresh_s=0.0)
    local = announce(client, deployment, "echo2")
    dead = announce(client, deployment, "echo2", host="gone-host")
    client.delete(streams.replica_heartbeat(dead))  # kill -9: its heartbeat expired

    assert routes.stays_on_host("hidden")
    assert client.hkeys(streams.deployment_replicas(deployment)) == [local.encode()]


def test_what_the_client_sees_and_what_no_stage_reads_leave_the_host(client, deployment):
    announce(client, deployment, "voice")
    voiced = PayloadRoutes(client, spec("voice", "echo", deployment), HERE, refresh_s=0.0)
    assert voiced.stays_on_host("hidden")
    assert not voiced.stays_on_host("text")  # the stage's client-visible modality goes to the API
    last = PayloadRoutes(client, spec("voice", "voice", deployment), HERE, refresh_s=0.0)
    assert not last.stays_on_host("audio") and not last.stays_on_host("hidden")  # no stage after it


def test_a_draining_reader_still_counts_and_a_stopped_one_does_not(client, deployment):
    routes = PayloadRoutes(client, spec("chain", "echo", deployment), HERE, refresh_s=0.0)
    announce(client, deployment, "echo2", host="elsewhere", state="STOPPED")
    announce(client, deployment, "echo2", state="DRAINING")
    assert routes.stays_on_host("hidden")
