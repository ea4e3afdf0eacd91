"""A client that disconnects mid-stream cancels the request in every stage (the replica's
work drains) and its history row ends `cancelled`; a deployment at its queue limit answers
503 with Retry-After instead of waiting."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
import redis
from procs import wait_for

from control_plane.inference.models import InferenceRequest
from stages import streams

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

STEP_S = 0.2
WORD_COUNT = 400  # under the default max_tokens of 512: the echo stage answers one word per step
WORDS = " ".join(f"word{i}" for i in range(WORD_COUNT))
UNCANCELLED_RUN_S = WORD_COUNT * STEP_S
"""How long the request runs if nobody cancels it: far longer than any wait below, so a replica
that drains within those waits was cancelled, it did not just finish."""
WAIT_S = 20  # generous for a loaded machine; every wait stays well inside UNCANCELLED_RUN_S


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


def wait_until_the_replica_runs_one_request(stack, name: str) -> None:
    """The heartbeat reports the load every interval, so it may not show a request that just started."""
    wait_for(lambda: replica_load(stack, name)[0] == 1, timeout=WAIT_S, what="the replica to report the request")


def wait_until_the_replica_drains(stack, name: str) -> None:
    wait_for(lambda: replica_load(stack, name) == (0, 0), timeout=WAIT_S, what="the replica to drain")


def test_disconnect_mid_stream_cancels_the_work_and_records_it(serving_stack):
    config = {"max_queue": 1, "stages": {"echo": {"options": {"delay_s": STEP_S}}}}
    serving_stack.deploy("echo-slow", "echo", deploy_config=config)
    serving_stack.wait_running("echo-slow")

    body = {"model": "echo-slow", "messages": [{"role": "user", "content": WORDS}], "stream": True}
    headers = {"Authorization": f"Bearer {serving_stack.user_secret}"}
    request_id = None
    started_at = time.monotonic()
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
            wait_until_the_replica_runs_one_request(serving_stack, "echo-slow")

            # while it runs, the deployment is full (max_queue 1): another request is refused, not queued
            refused = serving_stack.http("POST", "/v1/chat/completions", json={**body, "stream": False})
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "queue_full" and refused.headers["Retry-After"] == "1"
        # leaving the block closes the connection mid-stream

    row = wait_for(
        lambda: InferenceRequest.objects.filter(request_id=request_id, status="cancelled").first(),
        timeout=WAIT_S,
        what="the history row to end cancelled",
    )
    assert row.finish_reason == "cancelled" and row.error["code"] == "client_disconnected"
    assert row.output_text and WORDS.startswith(row.output_text) and row.output_text != WORDS
    wait_until_the_replica_drains(serving_stack, "echo-slow")
    assert time.monotonic() - started_at < UNCANCELLED_RUN_S  # the replica dropped the work, it did not finish it

    # the slot is free again: the next request is served
    reply = serving_stack.http("POST", "/v1/chat/completions", json={**body, "messages": [{"role": "user", "content": "next one"}], "stream": False})  # fmt: skip
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] == "next one"
    serving_stack.history_written()
    assert InferenceRequest.objects.filter(deployment_name="echo-slow", status="failed", http_status=503).count() == 1

    disconnect_while_waiting_for_a_whole_answer(serving_stack, "echo-slow")


def disconnect_while_waiting_for_a_whole_answer(serving_stack, name: str) -> None:
    body = {"model": name, "messages": [{"role": "user", "content": WORDS}]}
    started_at = time.monotonic()
    post_and_hang_up_while_it_runs(serving_stack, name, body)
    row = wait_for(
        lambda: InferenceRequest.objects.filter(deployment_name=name, stream=False, status="cancelled").first(),
        timeout=WAIT_S,
        what="the non-streamed request to end cancelled",
    )
    assert row.route == "chat.completions" and not row.stream
    wait_until_the_replica_drains(serving_stack, name)
    assert time.monotonic() - started_at < UNCANCELLED_RUN_S


def post_and_hang_up_while_it_runs(stack, name: str, body: dict) -> None:
    """POST a non-streamed request on a raw socket and close it, unanswered, once the replica runs it.

    A raw socket, because an HTTP client gives up only on a timeout, which on a loaded machine may
    fire before the request reached the replica (then the drain below would prove nothing)."""
    payload = json.dumps(body).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{stack.port}\r\n"
        f"Authorization: Bearer {stack.user_secret}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", stack.port), timeout=WAIT_S) as connection:
        connection.sendall(head.encode() + payload)
        wait_until_the_replica_runs_one_request(stack, name)
