"""Two `manage.py orchestrator` processes against one Redis: both route requests, exactly one
holds the reconciler lease, and killing one mid-stream loses no request in flight."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
import redis
from procs import wait_for
from runtime_serving import collect, request, text_of

from stages import streams

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
WORDS = " ".join(f"w{index}" for index in range(12))


def orchestrator_id(stack, name: str) -> str:
    import socket

    return f"{socket.gethostname()}:{stack.procs[name].pid}"


def leader(client: redis.Redis) -> str | None:
    value = client.get(streams.reconciler_leader())
    return value.decode() if value else None


def consumers_of(client: redis.Redis, stream: str) -> set[str]:
    return {c["name"].decode() for c in client.xinfo_consumers(stream, streams.ORCHESTRATOR_GROUP)}


def test_two_orchestrators_serve_together_one_leads_and_either_may_die(stack):
    stack.start_orchestrator("orchestrator-2")
    client = redis.Redis.from_url(stack.redis.url)
    both = {orchestrator_id(stack, "orchestrator"), orchestrator_id(stack, "orchestrator-2")}
    wait_for(
        lambda: all(client.exists(streams.orchestrator_heartbeat(o)) for o in both), timeout=60, what="both beating"
    )
    config = {"stages": {"echo": {"replicas": 2, "options": {"delay_s": 0.1}}}}
    deployment = stack.deploy("echo-two", "echo", deploy_config=config)
    stack.wait_state("echo-two", "RUNNING")

    # exactly one of them holds the reconciler lease, and keeps it
    held = {leader(client) for _ in range(10) if not time.sleep(0.2)}
    assert len(held) == 1 and held <= both, (held, both)
    (first_leader,) = held

    # both read the deployment's outputs, and every request is served
    async def many(count: int):
        return await asyncio.gather(
            *(collect(stack, deployment["id"], request(f"hello {i} " + WORDS)) for i in range(count))
        )

    served = asyncio.run(many(16))
    assert all(messages[-1].kind == "complete" for messages in served), [m[-1] for m in served]
    assert [text_of(messages) for messages in served] == [f"hello {i} " + WORDS for i in range(16)]
    assert both <= consumers_of(client, streams.deployment_output(deployment["id"]))

    # the leader dies mid-stream: the survivor claims what it left pending and takes the lease
    async def kill_the_leader_mid_stream():
        late = [request(f"late {i} " + WORDS) for i in range(8)]
        answered: set[str] = set()
        tasks = [asyncio.create_task(collect(stack, deployment["id"], r, answered=answered)) for r in late]
        async with asyncio.timeout(30):
            while not answered:  # until some of them are streaming
                await asyncio.sleep(0.02)
        name = next(n for n in ("orchestrator", "orchestrator-2") if orchestrator_id(stack, n) == first_leader)
        stack.procs[name].signal(signal.SIGKILL)
        return await asyncio.gather(*tasks)

    in_flight = asyncio.run(kill_the_leader_mid_stream())
    assert all(messages[-1].kind == "complete" for messages in in_flight), [m[-1] for m in in_flight]
    assert [text_of(messages) for messages in in_flight] == [f"late {i} " + WORDS for i in range(8)]
    (survivor,) = both - {first_leader}
    wait_for(lambda: leader(client) == survivor, timeout=30, what="the survivor to take the lease")

    after = asyncio.run(collect(stack, deployment["id"], request("after the failover")))
    assert after[-1].kind == "complete" and text_of(after) == "after the failover"
