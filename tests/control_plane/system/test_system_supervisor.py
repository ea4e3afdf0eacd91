"""`manage.py omni_up`: the embedded platform comes up, answers, restarts a killed orchestrator, and
stops cleanly."""

import os
import re
import signal
import socket
import subprocess
import time

import httpx
import pytest
from procs import PYTHON, REPO, Proc, free_port, pid_alive, wait_for

pytestmark = pytest.mark.slow

WEB = ["--web-processes", "2"]
COMPONENTS = ("redis", "worker", "orchestrator", "history", "web-1", "web-2")


@pytest.fixture
def embedded_env(platform_env, tmp_path):
    """No REDIS_URL: omni_up starts its own redis-server in a private var dir."""
    env = {k: v for k, v in platform_env.items() if k != "REDIS_URL"}
    env["OMNISTAGE_VAR_DIR"] = str(tmp_path / "var")
    return env


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_omni_up_serves_health_and_ready_then_stops_everything_on_a_signal(embedded_env, tmp_path, signum):
    port = free_port()
    started = time.monotonic()
    up = Proc([PYTHON, "manage.py", "omni_up", "--port", str(port), "--concurrency", "1", *WEB], embedded_env,
              tmp_path / "up.log")  # fmt: skip
    try:
        wait_for(lambda: "Omnistage is ready" in up.output(), timeout=120, what="omni_up ready")
        print(f"omni_up ready after {time.monotonic() - started:.1f} s")
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
        response = wait_for(
            lambda: (r := httpx.get(f"http://127.0.0.1:{port}/ready", timeout=5)).status_code == 200 and r,
            timeout=30,
            what="/ready 200",
        )
        assert response.json()["status"] == "ready"
        log = up.output()
        pids = [int(pid) for pid in re.findall(r"ready \(pid (\d+)\)", log)]
        assert len(pids) == len(COMPONENTS), log
        for name in COMPONENTS:
            assert re.search(rf"\[\s*{name}\]", log), f"no prefixed log lines for {name}"

        up.process.send_signal(signum)
        assert up.process.wait(timeout=60) == 0
        wait_for(lambda: not any(pid_alive(pid) for pid in pids), timeout=15, what="children gone")
        assert "all components stopped" in up.output()
    finally:
        up.stop()


def test_omni_up_exits_non_zero_naming_the_component_that_failed(embedded_env, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [PYTHON, "manage.py", "omni_up", "--port", str(port), "--concurrency", "1", *WEB],
            cwd=REPO, env=embedded_env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    assert result.returncode != 0
    assert f"start-up failed: web cannot listen on 127.0.0.1:{port}" in result.stdout
    assert "all components stopped" in result.stdout


def test_a_killed_orchestrator_is_restarted_and_a_component_that_is_not_restartable_stops_everything(
    embedded_env, tmp_path
):
    port = free_port()
    up = Proc([PYTHON, "manage.py", "omni_up", "--port", str(port), "--concurrency", "1", *WEB], embedded_env,
              tmp_path / "up.log")  # fmt: skip
    try:
        wait_for(lambda: "Omnistage is ready" in up.output(), timeout=120, what="omni_up ready")
        log = up.output()
        pids = dict(re.findall(r"\[\s*([\w-]+)\] ready \(pid (\d+)\)", log))
        assert set(pids) == set(COMPONENTS), log
        os.kill(int(pids["orchestrator"]), signal.SIGKILL)
        wait_for(lambda: "orchestrator exited with code -9; restarting it" in up.output(), timeout=30,
                 what="the orchestrator restarted")  # fmt: skip
        wait_for(lambda: "orchestrator " in up.output().split("restarting it", 1)[1]
                 and " running" in up.output().split("restarting it", 1)[1], timeout=60,
                 what="the new orchestrator running")  # fmt: skip
        assert up.process.poll() is None  # the platform kept running
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200

        os.kill(int(pids["web-1"]), signal.SIGKILL)  # the web tier is not restarted: a fault to report
        assert up.process.wait(timeout=60) != 0
        assert "web-1 exited with code -9; stopping everything" in up.output()
        assert "all components stopped" in up.output()
        wait_for(lambda: not any(pid_alive(int(pid)) for pid in pids.values()), timeout=15, what="children gone")
    finally:
        up.stop()


def test_a_restartable_component_that_keeps_dying_is_reported_and_stops_the_platform():
    import io
    import sys

    from control_plane.system.supervisor import Component, Supervisor

    out = io.StringIO()
    supervisor = Supervisor(out=out, max_restarts=2, restart_window_s=60)
    crashing = Component(
        "crashing",
        [sys.executable, "-c", "import sys, time; time.sleep(0.5); sys.exit(3)"],
        ready=lambda: True,
        restart=True,
    )
    steady = Component("steady", [sys.executable, "-c", "import time; time.sleep(60)"], ready=lambda: True)
    supervisor.start_group([steady, crashing])
    try:
        assert supervisor.watch() == 1
    finally:
        supervisor.stop_all()
    log = out.getvalue()
    assert log.count("crashing exited with code 3; restarting it") == 2
    assert "crashing exited 3 times within 60 s" in log and "crashing exited with code 3; stopping everything" in log
