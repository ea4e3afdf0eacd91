"""Dead work on a real replica host process: inputs of requests the orchestrator ended are
dropped unprocessed (in bulk, counted, one log line), and a running request it ended is freed
without waiting for the abort entry queued behind other work."""

from __future__ import annotations

import signal
import time

import pytest
from procs import wait_for
from replica_testing import (
    echo_spec,
    finished_output,
    forget,
    heartbeat,
    outputs,
    send_request,
    start_host,
    unique,
    wait_state,
)

from stages import streams
from stages.protocol import StageRequest

pytestmark = pytest.mark.timeout(120)

WORDS = " ".join(f"w{index}" for index in range(400))


@pytest.fixture
def replica(client, redis_url, tmp_path):
    replica_id, deployment_id = unique("replica"), unique("deployment")
    hosts = []

    def start(**options):
        host = start_host(echo_spec(replica_id, deployment_id, **options), redis_url, tmp_path / "host.log")
        hosts.append(host)
        return host

    yield replica_id, deployment_id, start, tmp_path / "host.log"
    for host in hosts:
        host.signal(signal.SIGKILL)
        host.stop()
    forget(client, replica_id, deployment_id)


def end(client, *wire_ids: str) -> None:
    """What the orchestrator does when requests fail, are cancelled or time out."""
    client.zadd(streams.aborted_requests(), dict.fromkeys(wire_ids, 1.0))


def test_a_backlog_of_ended_requests_is_dropped_in_bulk_counted_and_logged_once(client, replica):
    replica_id, deployment, start, log = replica
    dead = [unique("dead") for _ in range(300)]
    alive = [unique("alive") for _ in range(3)]
    for request_id in dead:
        send_request(client, replica_id, StageRequest(request_id=request_id, prompt="never worked on"))
        send_request(client, replica_id, StageRequest(request_id=request_id, seq=1, prompt=" more"))
    for request_id in alive:
        send_request(client, replica_id, StageRequest(request_id=request_id, prompt="served"))
    end(client, *dead)

    start()
    for request_id in alive:
        assert finished_output(client, deployment, request_id).finish_reason == "stop"
    assert outputs(client, deployment) and not any(o.request_id in set(dead) for o in outputs(client, deployment))
    beat = wait_for(lambda: (s := heartbeat(client, replica_id)) and s.dropped_inputs == 600 and s, timeout=10,
                    what="600 dropped inputs in the heartbeat")  # fmt: skip
    assert beat.queue_depth == 0
    text = log.read_text()
    assert "redelivered" not in text
    assert 1 <= text.count("dropped ") <= 600 // 64 + 2  # one line per read of 64 entries, not one per input


def test_a_running_request_ended_elsewhere_is_freed_without_its_abort_entry(client, replica):
    replica_id, deployment, start, _ = replica
    start(delay_s=0.02)
    wait_state(client, replica_id, "READY")
    send_request(client, replica_id, StageRequest(request_id="long", prompt=WORDS))
    wait_for(lambda: outputs(client, deployment, "long"), timeout=10, what="a first output")
    end(client, "long")
    wait_for(lambda: heartbeat(client, replica_id).running == 0, timeout=5, what="the request freed")
    send_request(client, replica_id, StageRequest(request_id="long", seq=1, prompt=" late chunk"))
    send_request(client, replica_id, StageRequest(request_id="next", prompt="still served"))
    assert finished_output(client, deployment, "next").finish_reason == "stop"
    produced = outputs(client, deployment, "long")
    assert len(produced) < 100 and not any(output.finished for output in produced)
    time.sleep(0.5)
    assert outputs(client, deployment, "long") == produced  # nothing more was worked on
