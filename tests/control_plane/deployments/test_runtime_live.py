"""The distributed runtime end to end: deployments created through REST, replicas hosted by a
real Celery worker, requests routed by the Redis-stream orchestrator; and its failures."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid

import pytest
import redis
import redis.asyncio
from procs import wait_for
from runtime_serving import collect, request, text_of
from tiny_checkpoints import tiny_checkpoint

from control_plane.orchestrator.serving import ServingUnavailable, serve
from stages import streams
from stages.protocol import SamplingParams, StageRequest

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_deployment_created_through_rest_serves_streamed_requests(stack):
    created = stack.deploy("echo-a", "echo", deploy_config={"stages": {"echo": {"options": {"delay_s": 0.02}}}})
    assert created["state"] == "PENDING" and len(created["replicas"]) == 1
    running = stack.wait_state("echo-a", "RUNNING")
    assert running["replicas"][0]["state"] == "RUNNING"
    assert running["replicas"][0]["host"]

    messages = asyncio.run(collect(stack, running["id"], request("hello big wide world")))
    assert text_of(messages) == "hello big wide world"
    assert len([m for m in messages if m.kind == "output"]) >= 4  # streamed piece by piece
    assert messages[-1].kind == "complete"
    assert messages[-1].summary.metrics["e2el_s"] > 0


def test_the_tiny_llm_deployment_serves_through_the_torch_engine(stack):
    model_dir = tiny_checkpoint("qwen2")
    running_name = "tiny-llm"
    stack.deploy(running_name, "llm", model_dir=str(model_dir))
    running = stack.wait_state(running_name, "RUNNING", timeout=180)
    chat = StageRequest(
        request_id=f"chat-{uuid.uuid4().hex[:8]}",
        messages=[{"role": "user", "content": "Hello there"}],
        sampling=SamplingParams(max_tokens=8, temperature=0.0),
    )
    messages = asyncio.run(collect(stack, running["id"], chat))
    assert messages[-1].kind == "complete", messages[-1]
    outputs = [m.output for m in messages if m.output is not None]
    assert sum(len(o.token_ids) for o in outputs) == 8
    assert outputs[-1].finish_reason == "length"


def test_an_engine_error_in_one_request_leaves_the_others_alone(stack):
    running = stack.deploy("echo-b", "echo", deploy_config={"stages": {"echo": {"options": {"delay_s": 0.05}}}})
    running = stack.wait_state("echo-b", "RUNNING")

    async def both():
        return await asyncio.gather(
            collect(stack, running["id"], request("one two three four five six")),
            collect(stack, running["id"], request("doomed", echo_fail=True)),
            collect(stack, running["id"], request("seven eight nine")),
        )

    good, bad, other = asyncio.run(both())
    assert text_of(good) == "one two three four five six" and good[-1].kind == "complete"
    assert text_of(other) == "seven eight nine" and other[-1].kind == "complete"
    assert bad[-1].kind == "fail"
    assert "echo_fail" in bad[-1].error.message


def test_a_deployment_whose_pool_has_no_worker_stays_scheduled_with_the_reason(stack):
    stack.deploy("echo-gpu", "echo", deploy_config={"stages": {"echo": {"pool": "gpu"}}})
    body = stack.wait_state("echo-gpu", "SCHEDULED", timeout=30)
    assert "pool 'gpu'" in body["state_reason"] and "none is live" in body["state_reason"]
    assert body["replicas"][0]["state"] == "SCHEDULED"


def replica_pid(stack, replica_id: str) -> int:
    import json

    client = redis.Redis.from_url(stack.redis.url)
    return json.loads(client.get(streams.replica_heartbeat(replica_id)))["pid"]


def test_killing_a_replica_host_before_any_output_reroutes_the_request(stack):
    config = {"stages": {"echo": {"replicas": 2, "options": {"delay_s": 2.0, "tokens_per_step": 50}}}}
    running = stack.deploy("echo-k", "echo", deploy_config=config)
    running = stack.wait_state("echo-k", "RUNNING", timeout=120)
    client = redis.Redis.from_url(stack.redis.url)
    stage_request = request("rerouted words arrive")

    async def scenario():
        task = asyncio.create_task(collect(stack, running["id"], stage_request))
        state_key = streams.request_state(stage_request.request_id)
        await asyncio.to_thread(wait_for, lambda: client.exists(state_key), 10, 0.05, "request placed")
        from stages.orchestrator import decode_state

        placed = decode_state(client.hget(state_key, "state")).stages[0].replica_id
        import os

        os.kill(replica_pid(stack, placed), signal.SIGKILL)
        started = time.monotonic()
        messages = await task
        return messages, time.monotonic() - started

    messages, elapsed = asyncio.run(scenario())
    assert messages[-1].kind == "complete", messages[-1]
    assert text_of(messages) == "rerouted words arrive"
    assert elapsed < 10
    # the dead host is restarted and claims what its dead consumer left pending
    body = stack.wait_state("echo-k", "RUNNING", timeout=60)
    assert sum(r["restarts"] for r in body["replicas"]) >= 1

    def nothing_pending():
        return all(
            client.xpending(streams.replica_input(r["id"]), streams.REPLICA_GROUP)["pending"] == 0
            for r in body["replicas"]
        )

    wait_for(nothing_pending, timeout=30, what="no pending entries")


def test_killing_a_replica_host_after_output_fails_the_request_clearly(stack):
    config = {"stages": {"echo": {"options": {"delay_s": 0.5}}}}
    running = stack.deploy("echo-f", "echo", deploy_config=config)
    running = stack.wait_state("echo-f", "RUNNING", timeout=120)
    replica_id = running["replicas"][0]["id"]

    async def scenario():
        client = redis.asyncio.Redis.from_url(stack.redis.url)
        messages = []
        started = None
        async for message in serve(running["id"], request("a b c d e f g h i j k l m n"), client=client):
            messages.append(message)
            if len(messages) == 1:
                import os

                os.kill(replica_pid(stack, replica_id), signal.SIGKILL)
                started = time.monotonic()
        await client.aclose()
        return messages, time.monotonic() - started

    messages, elapsed = asyncio.run(scenario())
    assert messages[-1].kind == "fail"
    assert "heart" in messages[-1].error.message or "stopped" in messages[-1].error.message
    assert elapsed < 10


def test_an_orchestrator_restart_mid_request_loses_nothing(stack):
    config = {"stages": {"echo": {"options": {"delay_s": 0.25}}}}
    running = stack.deploy("echo-o", "echo", deploy_config=config)
    running = stack.wait_state("echo-o", "RUNNING", timeout=120)
    words = " ".join(f"w{i}" for i in range(16))

    watcher = redis.Redis.from_url(stack.redis.url)

    def orchestrators() -> set[bytes]:
        return set(watcher.scan_iter(match=streams.orchestrator_heartbeat_pattern()))

    async def scenario():
        client = redis.asyncio.Redis.from_url(stack.redis.url)
        messages = []
        async for message in serve(running["id"], request(words), client=client):
            messages.append(message)
            if len(messages) == 2:
                before = orchestrators()
                stack.procs["orchestrator"].signal(signal.SIGKILL)
                stack.start_orchestrator()
                # serve() gives up on a request when no orchestrator's heartbeat lives; on a loaded
                # machine the new one can take longer to start than this stack's 1.5 s heartbeat TTL
                wait_for(
                    lambda known=before: orchestrators() - known, timeout=60, interval=0.1, what="a new orchestrator"
                )
        await client.aclose()
        return messages

    try:
        messages = asyncio.run(asyncio.wait_for(scenario(), 60))
    finally:
        watcher.close()
    assert messages[-1].kind == "complete", messages[-1]
    assert text_of(messages) == words


def test_a_redis_restart_fails_in_flight_requests_cleanly_and_then_serves_again(stack):
    config = {"stages": {"echo": {"options": {"delay_s": 0.3}}}}
    running = stack.deploy("echo-r", "echo", deploy_config=config)
    running = stack.wait_state("echo-r", "RUNNING", timeout=120)

    async def in_flight():
        client = redis.asyncio.Redis.from_url(stack.redis.url)
        try:
            async for message in serve(running["id"], request("x " * 40), client=client, idle_timeout_s=5):
                if message.kind == "output":
                    stack.redis.stop()
                    stack.redis.start()
        finally:
            await client.aclose()

    with pytest.raises(ServingUnavailable):
        asyncio.run(asyncio.wait_for(in_flight(), 30))

    def serves_again():
        messages = asyncio.run(collect(stack, running["id"], request("back again"), timeout=8, idle_timeout_s=4))
        return messages[-1].kind == "complete" and text_of(messages) == "back again"

    wait_for(serves_again, timeout=60, interval=1, what="serving after the Redis restart")
