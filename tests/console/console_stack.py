"""A live platform for the console tests: a private redis-server, a Celery worker, the
orchestrator, the history writer and daphne (the runtime tests' Stack pattern)."""

from __future__ import annotations

import time

import httpx
from history_testing import HISTORY_WRITER, history_written
from procs import PYTHON, Proc, RedisServer, free_port, wait_for


class ConsoleStack:
    """The platform's processes on a private Redis, so that no other test run shares its queues."""

    def __init__(self, env: dict, tmp_path):
        self.tmp = tmp_path
        self.redis = RedisServer(tmp_path / "redis").start()
        self.env = {**env, "REDIS_URL": self.redis.url}
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.procs = [
            self._proc("worker", [PYTHON, "-m", "celery", "-A", "control_plane", "worker", "-Q", "cpu", "-c", "1",
                                  "-n", "console@%h", "--without-mingle", "--without-gossip", "-l", "WARNING"]),
            self._proc("orchestrator", [PYTHON, "manage.py", "orchestrator"]),
            self._proc("history", HISTORY_WRITER),
            self._proc("web", [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port),
                               "control_plane.asgi:application"]),
        ]  # fmt: skip
        wait_for(lambda: httpx.get(f"{self.base}/health").status_code == 200, timeout=60, what="web up")

    def _proc(self, name: str, argv: list[str]) -> Proc:
        return Proc(argv, self.env, self.tmp / f"{name}-{time.monotonic_ns()}.log")

    def history_written(self) -> None:
        history_written(self.redis.url)

    def logs(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}" for log in self.tmp.glob("*.log"))

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()
        self.redis.stop()


def wait_running(name: str, stack: ConsoleStack, timeout: float = 120):
    from control_plane.deployments.models import Deployment

    def running():
        deployment = Deployment.objects.get(name=name)
        if deployment.state == "ERROR":
            raise AssertionError(f"{name} failed: {deployment.state_reason}")
        return deployment if deployment.state == "RUNNING" else None

    try:
        return wait_for(running, timeout=timeout, interval=0.3, what=f"{name} RUNNING")
    except TimeoutError:
        print(stack.logs())
        raise
