"""The host zygote: CPU replicas of torch families fork from a worker's pre-imported parent, and are
the same hosts as fresh interpreters would be (command line, lookup, serving, exit with the worker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import msgspec
import pytest
from procs import PYTHON, REPO, wait_for
from replica_testing import (
    HEARTBEAT_ENV,
    echo_spec,
    finished_output,
    forget,
    send_request,
    tiny_llm_spec,
    unique,
    wait_state,
)

from stages.protocol import ReplicaSpec, SamplingParams, StageRequest
from workers import zygote_spawn
from workers.processes import argv_of, pid_alive, replica_host_pids
from workers.replica_launcher import forks_from_zygote, host_argv, launch_replica_host

pytestmark = pytest.mark.live


def parent_of(pid: int) -> int:
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])


@pytest.fixture
def worker():
    """A process standing in for a Celery worker's main process: the zygote and hosts watch it."""
    process = subprocess.Popen([PYTHON, "-c", "import time; time.sleep(900)"])
    yield process
    process.kill()
    process.wait()


@pytest.fixture
def host_environment(monkeypatch):
    for name, value in HEARTBEAT_ENV.items():
        monkeypatch.setenv(name, value)


def spec_of(raw: dict) -> ReplicaSpec:
    return msgspec.convert(raw, ReplicaSpec)


def test_a_cpu_torch_replica_forks_from_the_workers_zygote_serves_and_exits_with_the_worker(
    client, redis_url, worker, host_environment
):
    spec = spec_of(tiny_llm_spec(unique("zygote"), unique("dep")))
    second = spec_of(tiny_llm_spec(unique("zygote"), spec.deployment_id))
    launch = launch_replica_host(spec, redis_url, client, parent_pid=worker.pid)
    zygote, hosts = parent_of(launch.pid), [launch.pid]
    try:
        assert launch.started
        assert argv_of(zygote)[1:3] == ["-m", "workers.host_zygote"]
        shown = argv_of(launch.pid)
        assert shown[1:3] == ["-m", "workers.replica_host"]
        assert json.loads(shown[shown.index("--spec-json") + 1])["replica_id"] == spec.replica_id
        assert replica_host_pids(spec.replica_id) == [launch.pid]

        wait_state(client, spec.replica_id, "READY", timeout=120)
        request = StageRequest(request_id=unique("r"), prompt="hello", sampling=SamplingParams(max_tokens=4))
        send_request(client, spec.replica_id, request)
        assert finished_output(client, spec.deployment_id, request.request_id, timeout=60).error is None

        again = launch_replica_host(spec, redis_url, client, parent_pid=worker.pid)
        assert not again.started and again.pid == launch.pid
        other = launch_replica_host(second, redis_url, client, parent_pid=worker.pid)
        hosts.append(other.pid)
        assert parent_of(other.pid) == zygote  # one zygote per worker
    finally:
        worker.kill()
    wait_for(lambda: not pid_alive(zygote), timeout=30, what="the zygote to exit with its worker")
    wait_for(lambda: not any(map(pid_alive, hosts)), timeout=30, what="its hosts to exit with the worker")
    forget(client, spec.replica_id, spec.deployment_id)
    forget(client, second.replica_id, spec.deployment_id)


def test_a_command_line_too_long_to_show_in_place_is_execed_and_only_hosts_are_forked(
    client, redis_url, worker, host_environment
):
    spec = spec_of({**echo_spec(unique("long"), unique("dep")), "model_dir": "x" * 40000})
    argv = host_argv(spec, redis_url, worker.pid)
    pid = zygote_spawn.spawn(argv, dict(os.environ), REPO, worker.pid)
    try:
        anything = [sys.executable, "-c", "print('anything')"]
        assert zygote_spawn.spawn(anything, dict(os.environ), REPO, worker.pid) is None  # hosts only
        assert argv_of(pid) == argv  # a fresh interpreter's own
        assert argv_of(parent_of(pid))[1:3] == ["-m", "workers.host_zygote"]
        assert replica_host_pids(spec.replica_id) == [pid]
    finally:
        worker.kill()
    wait_for(lambda: not pid_alive(pid), timeout=30, what="the host to exit with its worker")
    forget(client, spec.replica_id, spec.deployment_id)


def test_which_replicas_fork(monkeypatch):
    llm = tiny_llm_spec("r1", "d1")
    assert forks_from_zygote(spec_of(llm))
    assert not forks_from_zygote(spec_of(echo_spec("r1", "d1")))  # no torch to share
    assert not forks_from_zygote(spec_of({**llm, "device": "cuda:0"}))  # CUDA does not survive a fork
    assert not forks_from_zygote(spec_of({**llm, "family": "no-such-family"}))
    monkeypatch.setenv("OMNISTAGE_HOST_ZYGOTE", "0")
    assert not forks_from_zygote(spec_of(llm))


def test_a_command_line_is_rewritten_in_place_only_when_it_fits():
    script = (
        "import sys; from workers.host_zygote import set_command_line\n"
        "assert not set_command_line(['x' * 100000])\n"
        "assert set_command_line(['python', '-m', 'shown'])\n"
        "print(open('/proc/self/cmdline', 'rb').read().rstrip(b'\\0').split(b'\\0'))"
    )
    done = subprocess.run([PYTHON, "-c", script, "." * 64], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[b'python', b'-m', b'shown']"


def test_no_zygote_where_its_socket_path_is_too_long(monkeypatch, tmp_path, worker):
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    argv = host_argv(spec_of(tiny_llm_spec("r1", "d1")), "redis://127.0.0.1:1/0", worker.pid)
    assert zygote_spawn.spawn(argv, dict(os.environ), REPO, worker.pid) is None
    assert not any((deep / f"omnistage-zygotes-{os.getuid()}").iterdir())  # no start tried: no lock, no socket
