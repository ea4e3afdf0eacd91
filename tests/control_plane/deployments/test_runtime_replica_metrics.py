"""The replica, stage and device series of /metrics, rendered from heartbeat keys as replica hosts
and worker pools write them: one series per replica slot (its index, not its id), a state gauge
per state, histograms in Prometheus' cumulative form, devices by host, and nothing but the state
for a replica without a heartbeat."""

from __future__ import annotations

import json

import msgspec
import pytest
import redis
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from control_plane.deployments.models import Pipeline
from control_plane.deployments.services import deployment_create
from control_plane.inference.metrics import render
from stages import streams
from stages.protocol import ReplicaStatus
from stages.replica_stats import SECONDS_BOUNDS, Capacity, DeviceUsage, Histogram, StageStats

GIB = 1 << 30


def samples_of(text: bytes) -> dict[str, list]:
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def only(samples: dict, name: str, **labels) -> float:
    found = [v for sample_labels, v in samples.get(name, []) if labels.items() <= sample_labels.items()]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]


@pytest.fixture
def keys():
    client = redis.Redis.from_url(settings.REDIS_URL)
    written: list[str] = []

    def write(key: str, body: dict) -> None:
        client.set(key, json.dumps(body), ex=60)
        written.append(key)

    yield write
    if written:
        client.delete(*written)


def test_replica_stage_and_device_series_from_heartbeats(pipelines, keys):
    deployment = deployment_create(name="m-echo", pipeline=Pipeline.objects.get(name="echo-chain"), model_dir="-",
                                   deploy_config={"stages": {"echo2": {"replicas": 2}}})  # fmt: skip
    replicas = {(r.stage, r.index): r for r in deployment.replicas.all()}
    replicas[("echo", 0)].state = "RUNNING"
    replicas[("echo", 0)].save()
    steps = Histogram.empty(SECONDS_BOUNDS)
    for seconds in (0.004, 0.02, 0.02):
        steps.observe(seconds)
    stats = StageStats(unit="tokens", units=42, units_per_s=12.5, step_seconds=steps,
                       capacity=Capacity(kind="kv_blocks", used=5, total=64))  # fmt: skip
    stats.batch_size.observe(3)
    stats.queue_seconds.observe(0.002)
    usage = DeviceUsage(device="cpu", memory_used_bytes=6 * GIB, memory_total_bytes=16 * GIB,
                        process_bytes=GIB // 2, utilization=0.25)  # fmt: skip
    status = ReplicaStatus(replica_id=str(replicas[("echo", 0)].id), deployment_id=str(deployment.id), stage="echo",
                           state="READY", host="box-1", pid=7, queue_depth=4, running=2, stats=stats,
                           device_usage=usage)  # fmt: skip
    keys(streams.replica_heartbeat(status.replica_id), msgspec.to_builtins(status))
    keys(streams.pool_heartbeat("cpu", "w@box-1"), {"pool": "cpu", "hostname": "w@box-1", "host": "box-1",
         "devices": ["cpu"], "usage": [{"device": "cpu", "memory_used_bytes": GIB, "memory_total_bytes": 16 * GIB}]})  # fmt: skip

    samples = samples_of(render())

    echo = {"deployment": "m-echo", "stage": "echo", "replica": "0"}
    assert only(samples, "omnistage_replica_state", **echo, state="RUNNING") == 1.0
    assert only(samples, "omnistage_replica_state", **echo, state="PENDING") == 0.0
    for index in ("0", "1"):  # no heartbeat: a state, and nothing else
        assert only(samples, "omnistage_replica_state", deployment="m-echo", stage="echo2", replica=index,
                    state="PENDING") == 1.0  # fmt: skip
    assert not [labels for labels, _ in samples["omnistage_stage_queue_depth"] if labels["stage"] == "echo2"]

    assert only(samples, "omnistage_stage_queue_depth", **echo) == 4
    assert only(samples, "omnistage_stage_running_requests", **echo) == 2
    assert only(samples, "omnistage_stage_step_seconds_bucket", **echo, le="0.005") == 1
    assert only(samples, "omnistage_stage_step_seconds_bucket", **echo, le="0.025") == 3
    assert only(samples, "omnistage_stage_step_seconds_bucket", **echo, le="+Inf") == 3
    assert only(samples, "omnistage_stage_step_seconds_count", **echo) == 3
    assert only(samples, "omnistage_stage_step_seconds_sum", **echo) == pytest.approx(0.044)
    assert only(samples, "omnistage_stage_batch_size_bucket", **echo, le="4.0") == 1
    assert only(samples, "omnistage_stage_queue_seconds_count", **echo) == 1
    assert only(samples, "omnistage_stage_output_units_total", **echo, unit="tokens") == 42
    assert only(samples, "omnistage_stage_output_units_per_second", **echo, unit="tokens") == 12.5
    assert only(samples, "omnistage_stage_capacity_used", **echo, kind="kv_blocks") == 5
    assert only(samples, "omnistage_stage_capacity_total", **echo, kind="kv_blocks") == 64
    assert only(samples, "omnistage_replica_memory_bytes", **echo, device="cpu") == GIB // 2

    box = {"host": "box-1", "device": "cpu"}
    assert only(samples, "omnistage_device_memory_used_bytes", **box) == 6 * GIB  # the replica's newer reading
    assert only(samples, "omnistage_device_memory_total_bytes", **box) == 16 * GIB
    assert only(samples, "omnistage_device_utilization_ratio", **box) == 0.25
    # the labels are bounded: no replica ids
    assert all(set(labels) <= {"deployment", "stage", "replica", "state"}
               for labels, _ in samples["omnistage_replica_state"])  # fmt: skip
