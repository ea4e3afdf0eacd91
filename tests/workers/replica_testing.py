"""Helpers for the replica host and worker task tests: a Redis db of their own, echo replica
specs, sending input entries and reading outputs and status events."""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import msgspec
import redis
from parallel_workers import worker_database
from procs import PYTHON, REPO, Proc, redis_database_url, wait_for
from tiny_checkpoints import tiny_checkpoint

from stages import streams
from stages.protocol import Abort, Drain, ReplicaStatus, StageOutput, StageRequest, encode

WORKERS_DB = worker_database(10)
"""These tests use their own Redis database, so live processes they start see only their keys."""

HEARTBEAT_ENV = {"OMNISTAGE_HEARTBEAT_INTERVAL": "0.3", "OMNISTAGE_HEARTBEAT_TTL": "1.5", "PYTHONUNBUFFERED": "1"}


def with_db(url: str, db: int = WORKERS_DB) -> str:
    """The same Redis server, the worker tests' database."""
    return redis_database_url(url, db)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def echo_spec(replica_id: str, deployment_id: str, **options) -> dict:
    return {
        "replica_id": replica_id,
        "deployment_id": deployment_id,
        "family": "echo",
        "stage": "echo",
        "stage_id": 0,
        "model_dir": "",
        "stage_deploy": {"options": options},
    }


def tiny_llm_spec(replica_id: str, deployment_id: str) -> dict:
    """A replica of the tiny Qwen2 LLM: a family whose engine runs on torch."""
    return {**echo_spec(replica_id, deployment_id), "family": "llm", "stage": "llm",
            "model_dir": str(tiny_checkpoint("qwen2"))}  # fmt: skip


def host_env(redis_url: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    env.update(HEARTBEAT_ENV, REDIS_URL=redis_url)
    return env


def start_host(spec: dict, redis_url: str, log_path, parent_pid: int | None = None) -> Proc:
    argv = [PYTHON, "-m", "workers.replica_host", "--spec-json", json.dumps(spec), "--redis-url", redis_url]
    if parent_pid is not None:
        argv += ["--parent-pid", str(parent_pid)]
    return Proc(argv, host_env(redis_url), log_path)


def send_request(client: redis.Redis, replica_id: str, request: StageRequest) -> bytes:
    return client.xadd(streams.replica_input(replica_id), {"kind": "request", "data": encode(request)})


def send_abort(client: redis.Redis, replica_id: str, request_id: str) -> bytes:
    return client.xadd(
        streams.replica_input(replica_id), {"kind": "abort", "data": encode(Abort(request_id=request_id))}
    )


def send_drain(client: redis.Redis, replica_id: str) -> bytes:
    return client.xadd(streams.replica_input(replica_id), {"kind": "drain", "data": encode(Drain())})


_OUTPUT = msgspec.msgpack.Decoder(StageOutput)
_STATUS = msgspec.msgpack.Decoder(ReplicaStatus)


def outputs(client: redis.Redis, deployment_id: str, request_id: str | None = None) -> list[StageOutput]:
    """The deployment's outputs in stream order (of one request, if given)."""
    decoded = [_OUTPUT.decode(fields[b"data"]) for _, fields in client.xrange(streams.deployment_output(deployment_id))]
    return [output for output in decoded if request_id is None or output.request_id == request_id]


def output_replicas(client: redis.Redis, deployment_id: str) -> set[str]:
    return {fields[b"replica"].decode() for _, fields in client.xrange(streams.deployment_output(deployment_id))}


def finished_output(client: redis.Redis, deployment_id: str, request_id: str, timeout: float = 20.0) -> StageOutput:
    def finished():
        return next((o for o in outputs(client, deployment_id, request_id) if o.finished), None)

    return wait_for(finished, timeout=timeout, what=f"request {request_id} to finish")


def status_events(client: redis.Redis, replica_id: str) -> list[ReplicaStatus]:
    """The replica's status events on the orchestrator inbox, oldest first."""
    events = []
    for _, fields in client.xrange(streams.orchestrator_inbox()):
        if fields.get(b"kind") == b"replica_status":
            status = _STATUS.decode(fields[b"data"])
            if status.replica_id == replica_id:
                events.append(status)
    return events


def heartbeat(client: redis.Redis, replica_id: str) -> ReplicaStatus | None:
    raw = client.get(streams.replica_heartbeat(replica_id))
    return msgspec.json.decode(raw, type=ReplicaStatus) if raw else None


def wait_state(client: redis.Redis, replica_id: str, state: str, timeout: float = 30.0) -> ReplicaStatus:
    def reached():
        status = heartbeat(client, replica_id)
        return status if status is not None and status.state == state else None

    return wait_for(reached, timeout=timeout, what=f"replica {replica_id} to be {state}")


def pending_count(client: redis.Redis, replica_id: str) -> int:
    return client.xpending(streams.replica_input(replica_id), streams.REPLICA_GROUP)["pending"]


def forget(client: redis.Redis, replica_id: str, deployment_id: str) -> None:
    """Delete a test's keys (the inbox is shared: its events are told apart by replica id)."""
    client.delete(
        streams.replica_input(replica_id),
        streams.deployment_output(deployment_id),
        streams.replica_heartbeat(replica_id),
    )


LOAD_AND_REPORT = """
import json, sys, msgspec
from stages.protocol import ReplicaSpec
from workers.replica_engine import load_replica_engine
if len(sys.argv) > 2:
    import torch
    torch.set_num_threads(int(sys.argv[2]))
heard = []
load_replica_engine(msgspec.convert(json.loads(sys.argv[1]), ReplicaSpec), progress=lambda *phase: heard.append(phase))
torch = sys.modules.get("torch")
print(json.dumps({"heard": heard, "torch": torch is not None, "threads": torch and torch.get_num_threads()}))
"""


def load_in_fresh_interpreter(spec: dict, env: dict[str, str] | None = None, start_threads: int | None = None) -> dict:
    """What a fresh interpreter reports after it loads `spec`'s engine: the loading phases heard
    (fraction, phase), whether it imported torch, and torch's thread count then (None without torch).
    With `start_threads` it imports torch and sets that many threads first."""
    argv = [PYTHON, "-c", LOAD_AND_REPORT, json.dumps(spec)] + ([str(start_threads)] if start_threads else [])
    done = subprocess.run(argv, cwd=REPO, env=env or dict(os.environ),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])
