"""/health and /ready against real processes: daphne, a Celery worker pool, the
orchestrator, and a private redis-server that the test stops."""

import signal

import httpx
import pytest
from procs import PYTHON, Proc, RedisServer, free_port, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def stack(platform_env, tmp_path):
    redis_server = RedisServer(tmp_path / "redis").start()
    env = {**platform_env, "REDIS_URL": redis_server.url}
    port = free_port()
    procs = {
        "worker": Proc([PYTHON, "-m", "celery", "-A", "control_plane", "worker", "-Q", "cpu", "-c", "1",
                        "-n", "readytest@%h", "--without-mingle", "--without-gossip", "-l", "WARNING"],
                       env, tmp_path / "worker.log"),
        "orchestrator": Proc([PYTHON, "manage.py", "orchestrator"], env, tmp_path / "orchestrator.log"),
        "web": Proc([PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "control_plane.asgi:application"],
                    env, tmp_path / "web.log"),
    }  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    yield base, procs, redis_server, env
    for proc in procs.values():
        proc.stop()
    redis_server.stop()


def ready(base: str) -> httpx.Response:
    return httpx.get(f"{base}/ready", timeout=5)


def test_ready_names_each_component_that_goes_down(stack):
    base, procs, redis_server, _ = stack
    body = wait_for(lambda: (r := ready(base)).status_code == 200 and r, timeout=90, what="/ready 200").json()
    assert body["status"] == "ready"
    assert set(body["components"]) == {"database", "redis", "orchestrator", "workers"}
    assert httpx.get(f"{base}/health", timeout=5).json() == {"status": "ok"}

    procs["orchestrator"].signal(signal.SIGKILL)
    response = wait_for(lambda: (r := ready(base)).status_code == 503 and r, timeout=10, what="orchestrator down")
    assert response.json()["failing"] == ["orchestrator"]

    procs["worker"].signal(signal.SIGKILL)
    response = wait_for(
        lambda: "workers" in (r := ready(base)).json()["failing"] and r, timeout=10, what="workers down"
    )
    assert response.status_code == 503
    assert set(response.json()["failing"]) == {"orchestrator", "workers"}

    redis_server.stop()
    response = ready(base)
    assert response.status_code == 503
    assert "redis" in response.json()["failing"]
    assert "redis unreachable" in response.json()["components"]["redis"]["detail"]
    assert httpx.get(f"{base}/health", timeout=5).status_code == 200


def test_ready_names_the_database_when_it_is_unreachable(stack, tmp_path):
    base, procs, _, env = stack
    port = free_port()
    broken = Proc(
        [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "control_plane.asgi:application"],
        {**env, "DATABASE_URL": "postgres://nobody@127.0.0.1:1/nowhere"},
        tmp_path / "broken-web.log",
    )
    try:
        response = wait_for(lambda: ready(f"http://127.0.0.1:{port}"), timeout=60, what="web with a dead database")
        assert response.status_code == 503
        assert "database" in response.json()["failing"]
        assert response.json()["components"]["database"]["ok"] is False
    finally:
        broken.stop()
