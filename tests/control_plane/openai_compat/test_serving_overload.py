"""Over capacity and under faults, on the live stack: a full stage answers 503 with Retry-After
before any byte streams; a killed orchestrator ends its clients' streams with an error event and
their rows `failed`; rows of a killed web process are closed by the history writer's orphan sweep;
the queued work of requests whose clients left is dropped, not worked through."""

from __future__ import annotations

import json
import signal
import threading
import time
from contextlib import ExitStack

import httpx
import pytest
import redis
from procs import PYTHON, wait_for

from control_plane.inference.models import InferenceRequest
from stages import streams

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

STEP_S = 0.2
WORDS = " ".join(f"word{i}" for i in range(400))  # 80 s at one word per step: far past every wait below
WAIT_S = 60


@pytest.fixture
def platform_env(platform_env):
    """Orphaned rows are closed after 10 s instead of a minute."""
    return {**platform_env, "OMNISTAGE_HISTORY_ORPHAN_GRACE_S": "10"}


def chat(model: str, text: str = WORDS, stream: bool = True) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": text}], "stream": stream}


def open_stream(stack, exits: ExitStack, body: dict) -> tuple[str, object]:
    """Start a streamed request and read until its first word: (request id, the rest of its lines).
    Hold on to the lines: dropping them closes the connection (the client leaves)."""
    client = exits.enter_context(httpx.Client(timeout=120))
    headers = {"Authorization": f"Bearer {stack.user_secret}"}
    response = exits.enter_context(
        client.stream("POST", f"{stack.base}/v1/chat/completions", json=body, headers=headers)
    )
    assert response.status_code == 200
    lines = response.iter_lines()
    for line in lines:
        if line.startswith("data: {"):
            chunk = json.loads(line[6:])
            if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                return chunk["id"], lines
    raise AssertionError("the stream ended before its first word")


def test_a_full_stage_answers_503_with_retry_after_before_any_byte_streams(serving_stack):
    config = {"stages": {"echo": {"max_running": 1, "max_waiting": 1, "options": {"delay_s": STEP_S}}}}
    serving_stack.deploy("echo-tight", "echo", deploy_config=config)
    serving_stack.wait_running("echo-tight")
    with ExitStack() as exits:
        streams = [open_stream(serving_stack, exits, chat("echo-tight")) for _ in range(2)]  # held: 1 + 1 is full
        started = time.monotonic()
        refused = serving_stack.http("POST", "/v1/chat/completions", json=chat("echo-tight", "one more"))
        assert time.monotonic() - started < 5  # refused at once, not queued
        assert refused.status_code == 503, refused.text
        assert refused.headers["content-type"].startswith("application/json")  # no stream was started
        error = refused.json()["error"]
        assert error["code"] == "overloaded" and error["type"] == "server_overloaded"
        assert "'echo'" in error["message"] and "max_running=1" in error["message"]
        assert int(refused.headers["Retry-After"]) >= 1
        assert len(streams) == 2
    # the two clients left: their slots free up and the next request is served
    reply = wait_for(
        lambda: (r := serving_stack.http("POST", "/v1/chat/completions", json=chat("echo-tight", "next", False)))
        .status_code == 200 and r,
        timeout=WAIT_S, interval=0.5, what="a slot to free up",
    )  # fmt: skip
    assert reply.json()["choices"][0]["message"]["content"] == "next"
    serving_stack.history_written()
    row = InferenceRequest.objects.get(deployment_name="echo-tight", http_status=503)
    assert row.status == "failed" and row.error["code"] == "overloaded"


def stream_to_the_end(lines, into: list) -> None:
    try:
        into.extend(lines)
    except httpx.HTTPError as error:
        into.append(f"transport error: {error!r}")


def test_a_killed_orchestrator_ends_its_streams_with_an_error_event_and_their_rows_failed(serving_stack):
    serving_stack.deploy("echo-slow", "echo", deploy_config={"stages": {"echo": {"options": {"delay_s": STEP_S}}}})
    serving_stack.wait_running("echo-slow")
    with ExitStack() as exits:
        opened = [open_stream(serving_stack, exits, chat("echo-slow")) for _ in range(3)]
        tails: list[list] = [[] for _ in opened]
        readers = [
            threading.Thread(target=stream_to_the_end, args=(lines, tail), daemon=True)
            for (_, lines), tail in zip(opened, tails, strict=True)
        ]
        for reader in readers:
            reader.start()
        serving_stack.procs["orchestrator"].signal(signal.SIGKILL)
        killed_at = time.monotonic()
        for reader in readers:
            reader.join(timeout=WAIT_S)
            assert not reader.is_alive(), "a stream did not end after its orchestrator died"
    ended_after = time.monotonic() - killed_at
    for tail in tails:
        errors = [json.loads(line[6:])["error"] for line in tail if line.startswith('data: {"error"')]
        assert errors and errors[0]["code"] == "service_unavailable", tail[-3:]
        assert "no orchestrator is running" in errors[0]["message"]
    serving_stack.history_written()
    for request_id, _ in opened:
        row = InferenceRequest.objects.get(request_id=request_id)
        assert row.status == "failed" and row.error["code"] == "service_unavailable"
    print(f"streams ended {ended_after:.1f} s after the orchestrator was killed (heartbeat TTL 15 s)")

    # what the supervisor does: start it again; the platform serves again
    serving_stack.procs["orchestrator"] = serving_stack._proc("orchestrator", [PYTHON, "manage.py", "orchestrator"])
    reply = wait_for(
        lambda: (r := serving_stack.http("POST", "/v1/chat/completions", json=chat("echo-slow", "back", False)))
        .status_code == 200 and r,
        timeout=WAIT_S, interval=1, what="a request served after the restart",
    )  # fmt: skip
    assert reply.json()["choices"][0]["message"]["content"] == "back"


def test_rows_of_a_killed_web_process_are_closed_by_the_orphan_sweep(serving_stack):
    serving_stack.deploy("echo-slow", "echo", deploy_config={"stages": {"echo": {"options": {"delay_s": STEP_S}}}})
    serving_stack.wait_running("echo-slow")
    with ExitStack() as exits:
        opened = [open_stream(serving_stack, exits, chat("echo-slow")) for _ in range(2)]  # held open
        request_ids = [request_id for request_id, _ in opened]
        serving_stack.history_written()
        assert set(InferenceRequest.objects.filter(request_id__in=request_ids).values_list("status", flat=True)) == {
            "running"
        }
        serving_stack.procs["web"].signal(signal.SIGKILL)
        serving_stack.procs["web"].stop()
    rows = wait_for(
        lambda: (found := list(InferenceRequest.objects.filter(request_id__in=request_ids, status="failed")))
        and len(found) == 2 and found,
        timeout=WAIT_S, interval=1, what="the orphaned rows to be closed",
    )  # fmt: skip
    for row in rows:
        assert row.error["code"] == "serving_lost" and row.http_status == 503 and row.finished_at is not None
    serving_stack.start_web()


def voice_replica(stack, name: str) -> dict:
    """The heartbeat of the deployment's `voice` replica."""
    deployment = stack.http("GET", f"/api/deployments/{name}/", secret=stack.operator_secret).json()
    (replica,) = [replica for replica in deployment["replicas"] if replica["stage"] == "voice"]
    client = redis.Redis.from_url(stack.redis.url)
    try:
        raw = client.get(streams.replica_heartbeat(replica["id"]))
        return {**json.loads(raw), "input_entries": client.xlen(streams.replica_input(replica["id"]))}
    finally:
        client.close()


def test_the_queued_work_of_requests_whose_clients_left_is_dropped_in_every_stage(serving_stack):
    """A fast text stage streams every word to a slow voice stage, whose input stream backs up; when
    the clients leave, the voice replica drops that backlog unprocessed instead of working through it."""
    config = {"stages": {"echo": {"options": {"delay_s": 0.005}},
                         "voice": {"max_waiting": 32, "options": {"delay_s": 0.3}}}}  # fmt: skip
    serving_stack.deploy("slow-voice", "echo-voice", deploy_config=config)
    serving_stack.wait_running("slow-voice")
    body = {**chat("slow-voice"), "modalities": ["text", "audio"]}
    with ExitStack() as exits:
        opened = [open_stream(serving_stack, exits, body) for _ in range(8)]
        wait_for(lambda: voice_replica(serving_stack, "slow-voice")["input_entries"] > 1000, timeout=WAIT_S,
                 interval=0.2, what="the voice stage's input to back up")  # fmt: skip
        backlog = voice_replica(serving_stack, "slow-voice")["input_entries"]
        assert len(opened) == 8
    left_at = time.monotonic()  # every client hung up
    wait_for(
        lambda: (beat := voice_replica(serving_stack, "slow-voice"))["input_entries"] == 0 and beat["running"] == 0,
        timeout=WAIT_S, interval=0.2, what="the voice stage to drop its backlog",
    )  # fmt: skip
    drained_s = time.monotonic() - left_at
    # working through it would take at least 0.3 s per read of 64 entries; dropping it takes a few reads
    print(f"a backlog of {backlog} entries was gone {drained_s:.1f} s after the clients left")
    assert drained_s < backlog / 64 * 0.3
    dropped = wait_for(lambda: voice_replica(serving_stack, "slow-voice")["dropped_inputs"], timeout=10,
                       what="dropped inputs in the heartbeat")  # fmt: skip
    assert dropped > 0
