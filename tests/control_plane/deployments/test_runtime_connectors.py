"""Connectors on the platform path: a two-stage deployment on one host moves its large
payloads through shared memory (the replicas' published transfer stats say so, on the REST
replica status and on /metrics), frees every segment, and a cancelled request leaks none."""

from __future__ import annotations

import asyncio
import zlib

import httpx
import pytest
from procs import METRICS_TOKEN, wait_for
from runtime_serving import collect, request, text_of

from stages.connectors import owned_segments
from stages.echo_payloads import echo_payload

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
PAYLOAD_BYTES = 256 * 1024


def replicas_of(stack, name: str) -> dict[str, dict]:
    return {r["stage"]: r for r in stack.api("GET", f"/api/replicas/?deployment={name}").json()}


def transfer(stack, name: str, stage: str, kind: str) -> dict:
    return replicas_of(stack, name)[stage]["transfers"].get(kind, {})


def test_a_large_payload_to_a_stage_on_this_host_goes_through_shared_memory(stack):
    config = {"stages": {"echo": {"options": {"payload_bytes": PAYLOAD_BYTES}}}}
    deployment = stack.deploy("shm-chain", "echo-chain", deploy_config=config)
    stack.wait_state("shm-chain", "RUNNING")
    writer = replicas_of(stack, "shm-chain")["echo"]["id"]
    before = transfer(stack, "shm-chain", "echo", "shm.put").get("count", 0)  # the warm-up's

    stage_request = request("one two three four")
    messages = asyncio.run(collect(stack, deployment["id"], stage_request))

    assert messages[-1].kind == "complete" and text_of(messages) == "one two three four"
    crc = 0
    for seq in range(4):
        crc = zlib.crc32(echo_payload(stage_request.request_id, seq, PAYLOAD_BYTES).data, crc)
    received = [m.output.params for m in messages if m.output is not None][-1]  # the reader's last output
    assert received["received_payload_bytes"] == 4 * PAYLOAD_BYTES and received["received_payload_crc32"] == crc

    wait_for(lambda: transfer(stack, "shm-chain", "echo", "shm.put").get("count", 0) >= before + 4, timeout=30,
             what="the writer's published shm transfers")  # fmt: skip
    wait_for(lambda: transfer(stack, "shm-chain", "echo2", "shm.free").get("count", 0) >= before + 4, timeout=30,
             what="the reader's published frees")  # fmt: skip
    writer_stats = replicas_of(stack, "shm-chain")["echo"]["transfers"]
    reader_stats = replicas_of(stack, "shm-chain")["echo2"]["transfers"]
    assert "redis.put" not in writer_stats
    assert reader_stats["shm.get"]["bytes"] >= 4 * PAYLOAD_BYTES and reader_stats["shm.get"]["seconds"] > 0
    assert owned_segments(writer) == []

    metrics = httpx.get(f"{stack.base}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).text
    put = [line for line in metrics.splitlines() if line.startswith("omnistage_connector_bytes_total{")
           and 'connector="shm"' in line and 'direction="put"' in line and 'deployment="shm-chain"' in line]  # fmt: skip
    assert put and float(put[0].rsplit(" ", 1)[1]) >= 4 * PAYLOAD_BYTES, metrics[-2000:]


def test_a_request_cancelled_while_its_payloads_are_held_back_leaks_no_shared_memory(stack):
    # a non-streaming edge: the writer's outputs wait in the orchestrator until it finishes
    config = {"stages": {"echo": {"options": {"payload_bytes": PAYLOAD_BYTES, "delay_s": 0.3}}}}
    deployment = stack.deploy("shm-batch", "echo-chain-batch", deploy_config=config)
    stack.wait_state("shm-batch", "RUNNING")
    writer = replicas_of(stack, "shm-batch")["echo"]["id"]
    wait_for(lambda: owned_segments(writer) == [], timeout=30, what="the warm-up's segments freed")

    async def cancel_midway():
        task = asyncio.create_task(collect(stack, deployment["id"], request(" ".join(f"w{i}" for i in range(30)))))
        await asyncio.to_thread(wait_for, lambda: len(owned_segments(writer)) >= 3, 30, 0.05, "held payloads")
        task.cancel()  # the client goes away: serve() cancels the request
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_midway())
    wait_for(lambda: owned_segments(writer) == [], timeout=30, what="every held segment released")
    # the writer unlinked them itself, told by the orchestrator (not the reader, not a sweep)
    wait_for(lambda: transfer(stack, "shm-batch", "echo", "shm.free").get("count", 0) >= 3, timeout=30,
             what="the writer's published releases")  # fmt: skip
