"""Placement over two hosts, each with its own worker pool (`cpu.a`, `cpu.b`) and its own /dev/shm:
the tiny Qwen2.5-Omni with its thinker on host A and talker + code2wav on host B, and with every
stage on both hosts. The connectors keep a payload in shared memory when its reader runs on the
writer's host and send it through Redis when it runs on the other one, as the transfer counters
on the replica rows show. (The thinker's hidden states are the omni's tensor payloads: the talker
hands code2wav its codes as token ids.)"""

from __future__ import annotations

import asyncio

import pytest
from hosts_stack import collect, omni_request, summary_of
from procs import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.timeout(1200)]

TALKER = {"sampling": {"max_tokens": 24}}
SPLIT = {
    "stages": {
        "thinker": {"pool": "cpu.a", "connector": "shm"},
        "talker": {"pool": "cpu.b", "connector": "shm", **TALKER},
        "code2wav": {"pool": "cpu.b"},
    }
}
BOTH_HOSTS = {"replicas": 2, "pools": ["cpu.a", "cpu.b"]}
SPREAD = {
    "stages": {
        "thinker": {**BOTH_HOSTS, "connector": "shm"},
        "talker": {**BOTH_HOSTS, "connector": "shm", **TALKER},
        "code2wav": BOTH_HOSTS,
    }
}


def counts(replica: dict) -> dict[str, int]:
    return {name: int(totals["count"]) for name, totals in (replica["transfers"] or {}).items()}


def published(stack, name: str, ready) -> list[dict]:
    """The deployment's replica rows once `ready(rows)` holds (their counters come with heartbeats)."""
    try:
        return wait_for(lambda: (lambda rows: rows if ready(rows) else None)(stack.replicas(name)), timeout=60,
                        interval=0.5, what="the replicas' published transfers")  # fmt: skip
    except TimeoutError:
        raise AssertionError([(r["stage"], r["host"], counts(r)) for r in stack.replicas(name)]) from None


def run_requests(stack, deployment_id: str, texts: list[str]) -> list[list]:
    async def every():
        return await asyncio.gather(*(collect(stack.redis.url(), deployment_id, omni_request(t)) for t in texts))

    return asyncio.run(every())


def assert_spoken(results: list[list]) -> None:
    for messages in results:
        assert messages[-1].kind == "complete", messages[-1]
        assert "".join(m.output.text for m in messages if m.output is not None)
        assert summary_of(messages).metrics.get("audio_s", 0) > 0


def test_thinker_on_one_host_and_talker_with_code2wav_on_the_other(hosts_stack, omni_dir):
    stack = hosts_stack
    created = stack.deploy("split", "qwen2_5_omni", omni_dir, SPLIT)
    running = stack.wait_state("split", "RUNNING", timeout=900)
    placed = {r["stage"]: (r["pool"], r["host"]) for r in running["replicas"]}
    assert placed == {"thinker": ("cpu.a", "host-a"), "talker": ("cpu.b", "host-b"), "code2wav": ("cpu.b", "host-b")}

    assert_spoken(run_requests(stack, created["id"], ["Hello there.", "How are you?"]))

    def crossed(rows: list[dict]) -> bool:
        by_stage = {r["stage"]: counts(r) for r in rows}
        return by_stage["thinker"].get("redis.put", 0) > 0 and by_stage["talker"].get("redis.get", 0) > 0

    by_stage = {r["stage"]: counts(r) for r in published(stack, "split", crossed)}
    # thinker -> talker crosses hosts: the hidden states go through Redis, never shared memory
    assert "shm.put" not in by_stage["thinker"] and "shm.get" not in by_stage["talker"], by_stage
    assert not any(kind in stage for stage in by_stage.values() for kind in ("shm.fallback", "shm.export")), by_stage


def test_every_stage_on_both_hosts_keeps_each_request_on_one_host_in_shared_memory(hosts_stack, omni_dir):
    stack = hosts_stack
    created = stack.deploy("spread", "qwen2_5_omni", omni_dir, SPREAD)
    stack.wait_state("spread", "RUNNING", timeout=900)
    placed = sorted((r["stage"], r["pool"], r["host"]) for r in stack.all_running("spread", per_host=3))
    assert placed == sorted(
        (stage, f"cpu.{host}", f"host-{host}") for stage in ("thinker", "talker", "code2wav") for host in "ab"
    )

    assert_spoken(run_requests(stack, created["id"], [f"Question number {i}." for i in range(4)]))

    def both_hosts_passed(rows: list[dict]) -> bool:
        """Each host's thinker wrote shared memory and its talker read it, as their heartbeats published
        (each replica's counters arrive with its own heartbeat: the talker's read can show first)."""
        wanted = {"thinker": "shm.put", "talker": "shm.get"}
        return all(counts(r).get(wanted[r["stage"]], 0) for r in rows if r["stage"] in wanted)

    replicas = published(stack, "spread", both_hosts_passed)
    for replica in replicas:
        seen = counts(replica)
        where = (replica["stage"], replica["host"], seen)
        crossed = [
            kind for kind in seen if kind == "redis.get" or (kind == "redis.put" and replica["stage"] != "code2wav")
        ]
        assert not crossed, where  # code2wav's audio is for the client, whose API may be anywhere
        assert "shm.fallback" not in seen and "shm.export" not in seen, where
        if replica["stage"] == "thinker":
            assert seen.get("shm.put", 0) > 0, where
