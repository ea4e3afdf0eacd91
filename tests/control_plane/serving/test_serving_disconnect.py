"""A client that disconnects mid-stream cancels the request in every stage (the replica's
work drains) and its history row ends `cancelled`; a deployment at its queue limit answers
503 with Retry-After instead of waiting."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
import redis
from procs import wait_for

from control_plane.inference.models import InferenceRequest
from stages import streams

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WORDS = " ".join(f"word{i}" for i in range(60))  # 60 steps of 0.2 s: 12 s if nobody cancels


def replica_load(stack, name: str) -> tuple[int, int]:
    """(running, queue_depth) summed over the deployment's replicas, from their heartbeats."""
    deployment = stack.http("GET", f"/api/deployments/{name}/", secret=stack.operator_secret).json()
    client = redis.Redis.from_url(stack.redis.url)
    running = depth = 0
    for replica in deployment["replicas"]:
        raw = client.get(streams.replica_heartbeat(replica["id"]))
        status = json.loads(raw) if raw else {}
        running += status.get("running", 0)
        depth += status.get("queue_depth", 0)
    client.close()
    return running, depth


def test_disconnect_mid_stream_cancels_the_work_and_records_it(serving_stack):
    config = {"max_queue": 1, "stages": {"echo": {"options": {"delay_s": 0.2}}}}
    serving_stack.deploy("echo-slow", "echo", deploy_config=config)
    serving_stack.wait_running("echo-slow")

    body = {"model": "echo-slow", "messages": [{"role": "user", "content": WORDS}], "stream": True}
    headers = {"Authorization": f"Bearer {serving_stack.user_secret}"}
    request_id = None
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", f"{serving_stack.base}/v1/chat/completions", json=body, headers=headers) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            for line in lines:
                if line.startswith("data: {"):
                    chunk = json.loads(line[6:])
                    request_id = chunk["id"]
                    if chunk["choices"][0]["delta"].get("content"):
                        break
            assert request_id is not None
            assert replica_load(serving_stack, "echo-slow")[0] == 1

            # while it runs, the deployment is full (max_queue 1): another request is refused, not queued
            refused = serving_stack.http("POST", "/v1/chat/completions", json={**body, "stream": False})
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "queue_full" and refused.headers["Retry-After"] == "1"
        # leaving the block closes the connection mid-stream
    disconnected_at = time.monotonic()

    row = wait_for(
        lambda: InferenceRequest.objects.filter(request_id=request_id, status="cancelled").first(),
        timeout=10,
        what="the history row to end cancelled",
    )
    assert row.finish_reason == "cancelled" and row.error["code"] == "client_disconnected"
    assert row.output_text and WORDS.startswith(row.output_text) and row.output_text != WORDS
    wait_for(lambda: replica_load(serving_stack, "echo-slow") == (0, 0), timeout=10, what="the replica to drain")
    assert time.monotonic() - disconnected_at < 10  # far less than the 12 s the request would have run

    # the slot is free again: the next request is served
    reply = serving_stack.http("POST", "/v1/chat/completions", json={**body, "messages": [{"role": "user", "content": "next one"}], "stream": False})  # fmt: skip
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] == "next one"
    assert InferenceRequest.objects.filter(deployment_name="echo-slow", status="failed", http_status=503).count() == 1

    disconnect_while_waiting_for_a_whole_answer(serving_stack, "echo-slow")


def disconnect_while_waiting_for_a_whole_answer(serving_stack, name: str) -> None:
    body = {"model": name, "messages": [{"role": "user", "content": WORDS}]}

    def call():
        try:
            serving_stack.http("POST", "/v1/chat/completions", json=body, timeout=1.5)
        except httpx.TimeoutException:
            pass  # the client gives up: its connection closes

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    row = wait_for(
        lambda: InferenceRequest.objects.filter(deployment_name=name, stream=False, status="cancelled").first(),
        timeout=10,
        what="the non-streamed request to end cancelled",
    )
    assert row.route == "chat.completions" and not row.stream
    wait_for(lambda: replica_load(serving_stack, name) == (0, 0), timeout=10, what="the replica to drain")
