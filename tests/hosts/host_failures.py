"""What the host-loss and partition tests share: a deployment of the tiny Qwen2.5-Omni on both
hosts whose thinkers take one request at a time (so each host holds requests that have had no
output yet), a burst of requests, and the checks of what happened to each."""

from __future__ import annotations

import time

import redis
from hosts_stack import HostsStack, ReplyLog, omni_request
from procs import wait_for

from stages import streams
from stages.orchestrator import decode_state

BOTH_HOSTS = {"replicas": 2, "pools": ["cpu.a", "cpu.b"]}
QUEUED = {
    "stages": {
        "thinker": {**BOTH_HOSTS, "max_batch": 1, "max_waiting": 6, "connector": "shm"},
        "talker": {**BOTH_HOSTS, "connector": "shm", "sampling": {"max_tokens": 24}},
        "code2wav": BOTH_HOSTS,
    }
}
BURST = 8
RESOLVE_S = 10.0
"""Every request held by a lost host is failed or re-placed on another host within this."""


def deploy_on_both(stack: HostsStack, name: str, omni_dir: str) -> dict:
    stack.deploy(name, "qwen2_5_omni", omni_dir, QUEUED)
    running = stack.wait_state(name, "RUNNING", timeout=900)
    running["replicas"] = stack.all_running(name, per_host=3)
    return running


def burst(log: ReplyLog, count: int = BURST) -> list[str]:
    return [log.submit(omni_request(f"Tell me about number {i}.", max_tokens=16)) for i in range(count)]


def held_by(stack: HostsStack, deployment_id: str, replica_ids: set[str]) -> set[str]:
    """The requests in flight that have a stage placed on one of `replica_ids`."""
    client = stack.redis_client()
    held = set()
    for member in client.smembers(streams.active_requests(deployment_id)):
        raw = client.hget(streams.request_state(member.decode()), "state")
        if raw is None:
            continue
        state = decode_state(raw)
        if any(progress.replica_id in replica_ids for progress in state.stages.values()):
            held.add(state.request_id)
    return held


def seconds_until_released(stack: HostsStack, deployment_id: str, replica_ids: set[str]) -> float:
    """How long until no request in flight is placed on `replica_ids` (failed, or re-placed)."""
    started = time.monotonic()
    wait_for(lambda: not held_by(stack, deployment_id, replica_ids), timeout=60, interval=0.1,
             what="the lost host's requests to be failed or re-placed")  # fmt: skip
    return time.monotonic() - started


def check_outcomes(log: ReplyLog, request_ids: list[str]) -> dict[str, list[str]]:
    """Each request ended once: completed with its audio, or, only if part of its answer had
    reached the client, failed naming the replica that went down. Returns the ids by outcome."""
    outcomes: dict[str, list[str]] = {"complete": [], "failed": [], "rerouted": []}
    for request_id in request_ids:
        messages = log.of(request_id)
        ends = [i for i, message in enumerate(messages) if message.kind in ("complete", "fail")]
        assert len(ends) == 1 and ends[0] == len(messages) - 1, (request_id, [m.kind for m in messages])
        last = messages[-1]
        if last.kind == "complete":
            assert last.summary.metrics.get("audio_s", 0) > 0, (request_id, last.summary)
            outcomes["complete"].append(request_id)
            if last.summary.attempts > 1:
                outcomes["rerouted"].append(request_id)
            continue
        assert any(m.kind == "output" for m in messages[:-1]), (request_id, last.error)  # no output: re-routed
        assert last.error.code == "replica_down", (request_id, last.error)
        assert "went down" in last.error.message and "after part of the answer" in last.error.message
        outcomes["failed"].append(request_id)
    return outcomes


def seen_once(log: ReplyLog, request_ids: list[str]) -> None:
    """No output reached the client twice (same stage and seq), nor after the request ended."""
    for request_id in request_ids:
        marks = [(m.output.stage_id, m.output.seq) for m in log.of(request_id) if m.output is not None]
        assert len(marks) == len(set(marks)), (request_id, marks)


def nothing_pending(stack: HostsStack, deployment_id: str, replicas: list[dict]) -> bool:
    """True when no request is in flight and no replica input entry waits for an acknowledgement; else
    raises with what is left (so a `wait_for` that times out names it)."""
    left = pending_now(stack, deployment_id, replicas)
    if left:
        raise AssertionError("; ".join(left))
    return True


def pending_now(stack: HostsStack, deployment_id: str, replicas: list[dict]) -> list[str]:
    """What is still in flight: the deployment's active requests with their state, and each replica's
    pending input entries per consumer."""
    client = stack.redis_client()
    left = []
    for member in sorted(client.smembers(streams.active_requests(deployment_id))):
        raw = client.hget(streams.request_state(member.decode()), "state")
        left.append(f"active {member.decode()}: {'no state' if raw is None else _placement(decode_state(raw))}")
    for replica in replicas:
        try:
            consumers = client.xinfo_consumers(streams.replica_input(replica["id"]), streams.REPLICA_GROUP)
        except redis.ResponseError:  # no such stream or group: nothing pending
            continue
        for consumer in consumers:
            if consumer["pending"]:
                name = consumer["name"].decode() if isinstance(consumer["name"], bytes) else consumer["name"]
                left.append(f"{replica['stage']} on {replica['host']} ({replica['id']}): {consumer['pending']} pending "
                            f"for consumer {name}, idle {consumer['idle']} ms")  # fmt: skip
    return left


def _placement(state) -> str:
    return ", ".join(f"{name}@{progress.replica_id}" for name, progress in state.stages.items())


def took_work(stack: HostsStack, name: str, host: str) -> int:
    """Shared-memory payloads the thinker on `host` has written (what it ran, since its start)."""
    for replica in stack.replicas(name):
        if replica["stage"] == "thinker" and replica["host"] == host:
            return int((replica["transfers"] or {}).get("shm.put", {}).get("count", 0))
    return 0
