"""The replica lifecycle tasks in a real Celery worker process, sent by name as the control
plane sends them: start (idempotent per replica id), stop (drain), and what a killed
worker leaves behind (nothing)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket

import psutil
import pytest
import redis
from celery import Celery
from procs import PYTHON, Proc, pid_alive, wait_for
from replica_testing import (
    HEARTBEAT_ENV,
    echo_spec,
    finished_output,
    forget,
    heartbeat,
    send_request,
    status_events,
    unique,
    wait_state,
)

from stages import streams
from stages.protocol import StageRequest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def celery_broker_url(redis_url: str) -> str:
    """What control_plane/settings.py makes of REDIS_URL for the worker we start."""
    if redis_url.startswith("unix://"):
        return "redis+socket://" + redis_url.removeprefix("unix://")
    return redis_url


@pytest.fixture(scope="module")
def sender(redis_url):
    """A Celery app that only sends tasks by name, like the control plane does."""
    app = Celery("test-sender", broker=celery_broker_url(redis_url))
    yield app
    app.close()


class Worker:
    def __init__(self, redis_url: str, log_path):
        self.queue = unique("test-pool")
        env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
        env.update(HEARTBEAT_ENV, REDIS_URL=redis_url, DJANGO_SETTINGS_MODULE="control_plane.settings")
        self.proc = Proc(
            [PYTHON, "-m", "celery", "-A", "control_plane", "worker", "-Q", self.queue, "-c", "1",
             "-n", f"{self.queue}@%h", "--without-mingle", "--without-gossip", "-l", "INFO"],
            env, log_path,
        )  # fmt: skip

    def wait_ready(self, client: redis.Redis) -> None:
        key = streams.pool_heartbeat(self.queue, f"{self.queue}@{socket.gethostname()}")
        try:
            wait_for(lambda: client.exists(key), timeout=90, what=f"worker {self.queue} to announce itself")
        except TimeoutError as error:
            raise TimeoutError(f"{error}; worker log:\n{self.proc.output()[-3000:]}") from None

    def succeeded(self, task_name: str) -> int:
        return len(re.findall(rf"Task {re.escape(task_name)}\[[^\]]+\] succeeded", self.proc.output()))


@pytest.fixture
def worker(client, redis_url, tmp_path):
    worker = Worker(redis_url, tmp_path / "worker.log")
    try:
        worker.wait_ready(client)
        yield worker
    finally:
        worker.proc.stop()
        client.delete(worker.queue, f"_kombu.binding.{worker.queue}", f"_kombu.binding_permanent.{worker.queue}")


@pytest.fixture
def replica(client):
    replica_id, deployment_id = unique("replica"), unique("deployment")
    yield replica_id, deployment_id
    for pid in host_pids(replica_id):
        os.kill(pid, signal.SIGKILL)
    forget(client, replica_id, deployment_id)


def host_pids(replica_id: str) -> list[int]:
    """Replica host processes of `replica_id` on this machine, found independently of workers/."""
    pids = []
    for process in psutil.process_iter(["pid", "cmdline", "status"]):
        argv = process.info["cmdline"] or []
        if "workers.replica_host" in argv and process.info["status"] != psutil.STATUS_ZOMBIE:
            spec = json.loads(argv[argv.index("--spec-json") + 1])
            if spec["replica_id"] == replica_id:
                pids.append(process.info["pid"])
    return pids


def argument(pid: int, name: str) -> str:
    argv = psutil.Process(pid).cmdline()
    return argv[argv.index(name) + 1]


def test_start_twice_runs_one_host_that_serves_and_stop_drains_it(client, sender, worker, replica):
    replica_id, deployment_id = replica
    spec = echo_spec(replica_id, deployment_id)
    sender.send_task("workers.start_replica", args=[spec], queue=worker.queue)
    sender.send_task("workers.start_replica", args=[spec], queue=worker.queue)

    ready = wait_state(client, replica_id, "READY")
    wait_for(lambda: worker.succeeded("workers.start_replica") == 2, timeout=30, what="both start tasks to run")
    assert host_pids(replica_id) == [ready.pid]
    assert int(argument(ready.pid, "--parent-pid")) == worker.proc.pid  # the worker's main process
    assert "not started: a host runs here already" in worker.proc.output()

    send_request(client, replica_id, StageRequest(request_id="through-celery", prompt="served by a hosted replica"))
    assert finished_output(client, deployment_id, "through-celery").finish_reason == "stop"

    sender.send_task("workers.stop_replica", args=[replica_id], queue=worker.queue)
    wait_for(lambda: not pid_alive(ready.pid), timeout=30, what="the host to exit after the drain")
    assert heartbeat(client, replica_id) is None
    assert [event.state for event in status_events(client, replica_id)] == ["LOADING", "READY", "DRAINING", "STOPPED"]
    assert worker.proc.process.poll() is None


def test_a_worker_killed_with_sigkill_leaves_no_replica_host_behind(client, sender, worker, replica):
    replica_id, deployment_id = replica
    sender.send_task("workers.start_replica", args=[echo_spec(replica_id, deployment_id)], queue=worker.queue)
    ready = wait_state(client, replica_id, "READY")

    pool_children = psutil.Process(worker.proc.pid).children()
    os.kill(worker.proc.pid, signal.SIGKILL)
    try:
        # polled while the host goes: its last beat expires a TTL (1.5 s) after it exits
        final = wait_state(client, replica_id, "ERROR", timeout=20)
        wait_for(lambda: not pid_alive(ready.pid), timeout=20, what="the host to exit with its worker")
    finally:
        for child in pool_children:  # the worker's group is not signalled by the fixture once its leader is gone
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
    assert str(worker.proc.pid) in final.error
