"""The replica host as a real process of the echo family against a real Redis: input stream
in, outputs on the deployment stream, status in heartbeats and inbox events."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading

import msgspec
import pytest
import redis
from procs import PYTHON, RedisServer, wait_for
from replica_testing import (
    echo_spec,
    finished_output,
    forget,
    heartbeat,
    outputs,
    pending_count,
    send_abort,
    send_drain,
    send_request,
    start_host,
    status_events,
    unique,
    wait_state,
)

from stages import streams
from stages.echo import EchoEngine
from stages.engine_stats import StepStats
from stages.orchestrator.replica_streams import StageStream
from stages.protocol import ReplicaSpec, RequestOptions, SamplingParams, StageOutput, StageRequest
from workers import replica_host
from workers.replica_host import ReplicaHost

pytestmark = pytest.mark.timeout(120)

WORDS = " ".join(f"w{index}" for index in range(200))


@pytest.fixture
def replica(client, redis_url, tmp_path):
    """A fresh replica id and deployment id; `replica.start(**options)` runs a host for them."""

    class Replica:
        id = unique("replica")
        deployment = unique("deployment")
        hosts: list = []

        def start(self, parent_pid=None, **options):
            spec = echo_spec(self.id, self.deployment, **options)
            host = start_host(spec, redis_url, tmp_path / f"host{len(self.hosts)}.log", parent_pid=parent_pid)
            self.hosts.append(host)
            return host

    replica = Replica()
    replica.hosts = []
    yield replica
    for host in replica.hosts:
        host.signal(signal.SIGKILL)
        host.stop()
    forget(client, replica.id, replica.deployment)


def request(request_id: str, prompt: str | None = None, **fields) -> StageRequest:
    return StageRequest(request_id=request_id, prompt=prompt, **fields)


def test_requests_stream_out_in_seq_order_and_status_goes_loading_then_ready(client, replica):
    replica.start()
    ready = wait_state(client, replica.id, "READY")
    assert ready.pid == replica.hosts[0].pid and ready.progress == 1.0 and ready.deployment_id == replica.deployment
    send_request(client, replica.id, request("a", "hello there world"))
    send_request(client, replica.id, request("b", "one two"))
    send_request(client, replica.id, request("c", "streamed", finished=False))
    send_request(client, replica.id, StageRequest(request_id="c", seq=1, prompt=" in two chunks", finished=True))

    for request_id, text in (("a", "hello there world"), ("b", "one two"), ("c", "streamed in two chunks")):
        finished_output(client, replica.deployment, request_id)
        produced = outputs(client, replica.deployment, request_id)
        assert [output.seq for output in produced] == list(range(len(produced)))
        assert "".join(output.text for output in produced) == text
        assert produced[-1].finish_reason == "stop" and not any(output.finished for output in produced[:-1])
    replica_fields = {fields[b"replica"] for _, fields in client.xrange(streams.deployment_output(replica.deployment))}
    assert replica_fields == {replica.id.encode()}

    assert [event.state for event in status_events(client, replica.id)] == ["LOADING", "READY"]
    assert client.xlen(streams.replica_input(replica.id)) == 0 and pending_count(client, replica.id) == 0
    beat = wait_for(lambda: (s := heartbeat(client, replica.id)) and s.running == 0 and s.queue_depth == 0 and s,
                    timeout=5, what="an idle heartbeat")  # fmt: skip
    assert beat.state == "READY"


def test_abort_stops_a_request_and_others_keep_going(client, replica):
    replica.start(delay_s=0.02)
    wait_state(client, replica.id, "READY")
    send_request(client, replica.id, request("long", WORDS))
    wait_for(lambda: outputs(client, replica.deployment, "long"), timeout=10, what="a first output")
    send_abort(client, replica.id, "long")
    send_request(client, replica.id, request("after", "still served"))
    assert finished_output(client, replica.deployment, "after").finish_reason == "stop"

    produced = outputs(client, replica.deployment, "long")
    assert produced and not any(output.finished for output in produced) and len(produced) < 200
    assert outputs(client, replica.deployment, "long") == produced  # nothing after the abort was processed
    wait_for(lambda: heartbeat(client, replica.id).running == 0, timeout=5, what="running back to 0")


def test_drain_refuses_new_work_finishes_running_requests_and_exits_zero(client, replica):
    host = replica.start(delay_s=0.01)
    wait_state(client, replica.id, "READY")
    send_request(client, replica.id, request("running", " ".join(WORDS.split()[:40])))
    wait_for(lambda: outputs(client, replica.deployment, "running"), timeout=10, what="a first output")
    send_drain(client, replica.id)
    send_request(client, replica.id, request("late", "too late"))

    assert host.process.wait(timeout=30) == 0, host.output()
    running = outputs(client, replica.deployment, "running")
    assert running[-1].finish_reason == "stop" and len(running) == 40
    late = outputs(client, replica.deployment, "late")
    assert len(late) == 1 and late[0].finish_reason == "error" and late[0].error.code == "replica_draining"
    assert [event.state for event in status_events(client, replica.id)] == ["LOADING", "READY", "DRAINING", "STOPPED"]
    assert heartbeat(client, replica.id) is None
    assert pending_count(client, replica.id) == 0


def test_bad_input_fails_only_that_request(client, replica):
    host = replica.start()
    wait_state(client, replica.id, "READY")
    stream = streams.replica_input(replica.id)
    send_request(client, replica.id, request("good", "fine words"))
    send_request(client, replica.id, request("no-prompt"))
    send_request(client, replica.id, request("zero-tokens", "x", sampling=SamplingParams(max_tokens=0)))
    client.xadd(stream, {"kind": "request", "data": msgspec.msgpack.encode({"request_id": "wrong-type", "seq": "0"})})
    client.xadd(stream, {"kind": "request", "data": b"\xc1 not msgpack"})
    client.xadd(stream, {"kind": "bogus", "data": b""})
    send_request(client, replica.id, StageRequest(request_id="never-started", seq=3, prompt="x"))
    send_request(client, replica.id, request("engine-fails", "x", options=RequestOptions(extra={"echo_fail": True})))
    send_request(client, replica.id, request("good-after", "still fine"))

    assert finished_output(client, replica.deployment, "good").finish_reason == "stop"
    assert finished_output(client, replica.deployment, "good-after").finish_reason == "stop"
    expected = {
        "no-prompt": ("invalid_request_error", "prompt"),
        "zero-tokens": ("invalid_request_error", "max_tokens"),
        "wrong-type": ("invalid_request_error", "data"),
        "never-started": ("server_error", None),
        "engine-fails": ("server_error", None),
    }
    for request_id, (error_type, param) in expected.items():
        failed = finished_output(client, replica.deployment, request_id)
        assert failed.finish_reason == "error" and failed.error is not None, request_id
        assert (failed.error.type, failed.error.param) == (error_type, param), (request_id, failed.error)
    assert host.process.poll() is None
    assert client.xlen(stream) == 0 and pending_count(client, replica.id) == 0
    assert "bad input entry" in host.output()


def test_a_redelivered_entry_is_acknowledged_and_ignored(client, replica):
    replica.start()
    wait_state(client, replica.id, "READY")
    first = request("once", "only once please", finished=False)
    send_request(client, replica.id, first)
    send_request(client, replica.id, first)  # the same (request id, seq) again, e.g. an orchestrator's retry
    chunk = StageRequest(request_id="once", seq=1, prompt=" thanks", finished=True)
    send_request(client, replica.id, chunk)
    send_request(client, replica.id, chunk)
    finished_output(client, replica.deployment, "once")
    send_request(client, replica.id, first)  # a late duplicate of a finished request
    send_request(client, replica.id, request("marker", "m"))
    finished_output(client, replica.deployment, "marker")

    produced = outputs(client, replica.deployment, "once")
    assert "".join(output.text for output in produced) == "only once please thanks"
    assert [output.seq for output in produced] == list(range(len(produced)))
    assert all(output.error is None for output in produced)
    assert client.xlen(streams.replica_input(replica.id)) == 0 and pending_count(client, replica.id) == 0


def test_a_new_host_claims_the_pending_entries_of_a_host_killed_with_sigkill(client, replica):
    first = replica.start()
    wait_state(client, replica.id, "READY")
    consumers = client.xinfo_consumers(streams.replica_input(replica.id), streams.REPLICA_GROUP)
    dead_consumer = consumers[0]["name"]
    assert dead_consumer.endswith(f":{first.pid}".encode())
    first.signal(signal.SIGKILL)
    first.process.wait(timeout=10)
    # What kill -9 leaves behind: entries the dead consumer had read but not yet acknowledged.
    send_request(client, replica.id, request("taken-1", "first taken"))
    send_request(client, replica.id, request("taken-2", "second taken"))
    client.xreadgroup(streams.REPLICA_GROUP, dead_consumer, {streams.replica_input(replica.id): ">"}, count=2)
    assert pending_count(client, replica.id) == 2

    second = replica.start()
    assert finished_output(client, replica.deployment, "taken-1").text == " taken"
    assert finished_output(client, replica.deployment, "taken-2").text == " taken"
    assert pending_count(client, replica.id) == 0
    names = [c["name"] for c in client.xinfo_consumers(streams.replica_input(replica.id), streams.REPLICA_GROUP)]
    assert names == [dead_consumer.rsplit(b":", 1)[0] + f":{second.pid}".encode()]
    assert heartbeat(client, replica.id).pid == second.pid  # the stale heartbeat of the dead host was taken over
    assert "took over 2 pending entries" in second.output()


def test_the_host_exits_when_its_parent_process_dies(client, replica):
    parent = subprocess.Popen([PYTHON, "-c", "import time; time.sleep(120)"])
    try:
        host = replica.start(parent_pid=parent.pid, delay_s=0.05)
        wait_state(client, replica.id, "READY")
        send_request(client, replica.id, request("in-flight", WORDS))
        wait_for(lambda: outputs(client, replica.deployment, "in-flight"), timeout=10, what="a first output")
        parent.kill()
        parent.wait()
        final = wait_state(client, replica.id, "ERROR", timeout=15)  # its last beat expires a TTL after it exits
        assert host.process.wait(timeout=15) == 3
    finally:
        parent.kill()
        parent.wait()
    failed = finished_output(client, replica.deployment, "in-flight", timeout=1)
    assert failed.finish_reason == "error" and failed.error.code == "replica_lost"
    assert [o.seq for o in outputs(client, replica.deployment, "in-flight")] == list(range(failed.seq + 1))
    assert str(parent.pid) in final.error
    assert status_events(client, replica.id)[-1].state == "ERROR"


def test_a_load_failure_reports_error_and_exits_non_zero(client, redis_url, replica, tmp_path):
    spec = echo_spec(replica.id, replica.deployment)
    spec["stage_deploy"] = {"max_batch": 0}
    host = start_host(spec, redis_url, tmp_path / "bad.log")
    replica.hosts.append(host)
    assert host.process.wait(timeout=30) == 1
    events = status_events(client, replica.id)  # the inbox keeps them; the last heartbeat expires in 1.5 s
    assert [event.state for event in events] == ["LOADING", "ERROR"]
    assert "stage_deploy.max_batch" in events[-1].error
    assert events[-1].permanent  # a configuration error: the control plane does not retry it


def test_a_malformed_spec_is_refused_before_the_host_starts(capsys):
    spec = {**echo_spec("r1", "d1"), "stage_deploy": {"dtype": "int3"}}
    assert replica_host.main(["--spec-json", json.dumps(spec), "--redis-url", "redis://nowhere:1"]) == 2
    assert "invalid --spec-json: Invalid enum value 'int3' - at `$.stage_deploy.dtype`" in capsys.readouterr().err


class FailingStepEngine(EchoEngine):
    """An echo engine whose step raises once a request with params["boom"] is running."""

    def add_request(self, request: StageRequest) -> None:
        super().add_request(request)
        self.boom = getattr(self, "boom", {})
        self.boom[request.request_id] = request.params.get("boom")

    def step(self) -> list[StageOutput]:
        for request_id, mode in getattr(self, "boom", {}).items():
            if mode and request_id in self.requests:
                error = RuntimeError(f"step broke on {request_id}")
                if mode == "named":
                    error.request_id = request_id
                raise error
        return super().step()


def run_in_thread(host: ReplicaHost) -> tuple[threading.Thread, list[int]]:
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(host.run()), daemon=True)
    thread.start()
    return thread, codes


def test_a_step_error_naming_its_request_fails_that_request_only(client, replica):
    spec = msgspec.convert(echo_spec(replica.id, replica.deployment, delay_s=0.01), ReplicaSpec)
    host = ReplicaHost(spec, client, build_engine=lambda spec: FailingStepEngine(delay_s=0.01))
    thread, codes = run_in_thread(host)
    try:
        wait_state(client, replica.id, "READY")
        send_request(client, replica.id, request("neighbour", "a b c d e f g h"))
        send_request(client, replica.id, request("culprit", "x", params={"boom": "named"}))
        failed = finished_output(client, replica.deployment, "culprit")
        assert failed.error.type == "server_error" and "step broke on culprit" in failed.error.message
        assert finished_output(client, replica.deployment, "neighbour").finish_reason == "stop"
    finally:
        host.stop_requested.set()
        thread.join(timeout=10)
    assert codes == [0]


def test_a_step_error_no_request_can_be_blamed_for_fails_all_and_reports_error(client, replica):
    spec = msgspec.convert(echo_spec(replica.id, replica.deployment, delay_s=0.01), ReplicaSpec)
    host = ReplicaHost(spec, client, build_engine=lambda spec: FailingStepEngine(delay_s=0.01))
    thread, codes = run_in_thread(host)
    try:
        wait_state(client, replica.id, "READY")
        send_request(client, replica.id, request("bystander", WORDS))
        wait_for(lambda: outputs(client, replica.deployment, "bystander"), timeout=10, what="a first output")
        send_request(client, replica.id, request("anonymous", "x", params={"boom": "anonymous"}))
        thread.join(timeout=10)
    finally:
        host.stop_requested.set()
        thread.join(timeout=10)
    assert codes == [1]
    for request_id in ("bystander", "anonymous"):
        failed = finished_output(client, replica.deployment, request_id, timeout=1)
        assert failed.error.code == "replica_failed" and "step broke on anonymous" in failed.error.message
    final = heartbeat(client, replica.id)
    assert final.state == "ERROR" and "step broke on anonymous" in final.error
    assert os.getpid() == final.pid


class PiecedEchoEngine(EchoEngine):
    """An echo engine that, like a decoder in pieces, runs `pieces` steps of work before each output:
    those steps return nothing but report a batch (`last_step`)."""

    def __init__(self, *args, pieces: int = 5, **kwargs):
        super().__init__(*args, **kwargs)
        self.pieces, self.ran = pieces, 0
        self.last_step = StepStats()

    def step(self) -> list[StageOutput]:
        if self.ran < self.pieces:
            self.ran += 1
            self.last_step = StepStats(batch=len(self.requests))
            return []
        self.ran = 0
        outputs = super().step()
        self.last_step = StepStats(batch=len(outputs), units=len(outputs))
        return outputs


def test_steps_that_run_a_piece_without_output_do_not_make_the_host_wait_for_input(client, replica):
    """Only a step that found nothing to compute backs the host off (it polls its input with a
    growing wait); a piece of a decode is work, and the next piece must follow at once."""
    spec = msgspec.convert(echo_spec(replica.id, replica.deployment), ReplicaSpec)
    host = ReplicaHost(spec, client, build_engine=lambda spec: PiecedEchoEngine())
    waits: list[int | None] = []
    wait_ms = host._wait_ms

    def recorded_wait_ms():
        wait = wait_ms()
        if host.engine.has_unfinished():
            waits.append(wait)
        return wait

    host._wait_ms = recorded_wait_ms
    thread, _ = run_in_thread(host)
    try:
        wait_state(client, replica.id, "READY")
        send_request(client, replica.id, request("pieced", "a b c d"))
        assert finished_output(client, replica.deployment, "pieced").finish_reason == "stop"
    finally:
        host.stop_requested.set()
        thread.join(timeout=10)
    assert len(waits) > 5 and set(waits) == {None}


def test_the_host_reconnects_after_a_redis_restart_and_serves_again(tmp_path):
    server = RedisServer(tmp_path / "redis").start()
    replica_id, deployment_id = unique("replica"), unique("deployment")
    host = start_host(echo_spec(replica_id, deployment_id), server.url, tmp_path / "host.log")
    try:
        client = redis.Redis.from_url(server.url, socket_timeout=5)
        wait_state(client, replica_id, "READY")
        send_request(client, replica_id, request("before", "before the restart"))
        finished_output(client, deployment_id, "before")

        server.stop()  # no persistence: the stream, its group and the heartbeat are gone
        server.start()
        client = redis.Redis.from_url(server.url, socket_timeout=5)
        wait_state(client, replica_id, "READY")  # the heartbeat came back
        send_request(client, replica_id, request("after", "after the restart"))
        assert finished_output(client, deployment_id, "after").text == " restart"
        assert host.process.poll() is None
    finally:
        host.stop()
        server.stop()


@pytest.mark.parametrize(
    ("device", "pinned", "sms", "group", "expected"),
    [
        ("cuda:1", "cuda:1", 96, False, StageStream("cuda:0", sms=96)),
        ("cuda:1", None, 96, False, StageStream("cuda:1", sms=96)),
        ("cuda:0", None, None, False, None),
        ("cpu", None, 96, False, None),
        ("cuda:0", None, 96, True, None),
    ],
    ids=["pinned-gpu", "gpu", "no-share", "cpu", "group"],
)
def test_a_single_stage_host_steps_on_a_confined_stream_only_where_its_stage_asks(
    client, monkeypatch, device, pinned, sms, group, expected
):
    """On the stage's GPU as the host's process names it; a group host leaves the streams to its members."""
    monkeypatch.delenv("OMNISTAGE_PINNED_DEVICE", raising=False)
    if pinned:
        monkeypatch.setenv("OMNISTAGE_PINNED_DEVICE", pinned)
    raw = {**echo_spec("r-sms", "d-sms"), "device": device}
    raw["stage_deploy"]["gpu_sms"] = sms
    if group:
        raw.update(group="g", members={"echo": {"device": device, "gpu_sms": sms}})
    spec = msgspec.convert(raw, ReplicaSpec)
    host = ReplicaHost(spec, client, build_engine=lambda spec: EchoEngine())
    assert replica_host.confined_stream(spec, host.device) == expected
