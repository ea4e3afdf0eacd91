"""A live platform for the tests: the processes `manage.py omni_up` supervises, started from the
same component list (control_plane/system/platform_components.py, web_tier.py), on a private
redis-server (a test may stop or restart any of them, Redis included) and a free port."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import httpx
import pytest
from history_testing import history_written
from procs import Proc, RedisServer, free_port, stop_together, wait_for

from control_plane.system.platform_components import (
    history_writer_component,
    orchestrator_component,
    worker_component,
)
from control_plane.system.supervisor import Component
from control_plane.system.web_tier import listening_socket, web_components

QUICK_WORKER = ["--without-mingle", "--without-gossip"]
"""A single test worker has no peers to sync with: it skips the start-up round trips that wait for them."""


def serving_env(platform_env: dict[str, str], tmp: Path) -> dict[str, str]:
    """The environment of a stack that serves requests in tests: quick replica restarts, media under
    `tmp`, and heartbeats a busy machine cannot starve (no failure detection is tested there)."""
    return {
        **platform_env,
        "OMNISTAGE_REPLICA_BACKOFF_BASE_S": "1",
        "OMNISTAGE_REQUEST_STREAM_TTL_S": "120",
        "OMNISTAGE_MEDIA_ROOT": str(tmp / "media"),
        "OMNISTAGE_HEARTBEAT_INTERVAL": "0.5",
        "OMNISTAGE_HEARTBEAT_TTL": "15",
    }


class LiveStack:
    """The worker pool (queue `cpu`, one process), the orchestrator, the history writer (unless
    `history=False`) and one web process, each a `Proc` in `procs` under its component's name."""

    def __init__(self, env: dict, tmp_path, *, worker_node: str, history: bool = True):
        self.tmp = tmp_path
        self.redis = RedisServer(tmp_path / "redis").start()
        self.env = env
        self.env["REDIS_URL"] = self.redis.url
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.ws_base = f"ws://127.0.0.1:{self.port}"
        self.worker_node = worker_node
        self.procs: dict[str, Proc] = {}
        self.start_worker()
        self.start_orchestrator()
        if history:
            self.start_history_writer()
        self.start_web()

    def _proc(self, name: str, argv: list[str], pass_fds: tuple[int, ...] = ()) -> Proc:
        return Proc(argv, self.env, self.tmp / f"{name}-{time.monotonic_ns()}.log", pass_fds=pass_fds)

    def start_component(self, component: Component, name: str | None = None) -> Proc:
        name = name or component.name
        self.procs[name] = self._proc(name, component.argv, component.pass_fds)
        return self.procs[name]

    def start_worker(self) -> Proc:
        component = worker_component("cpu", 1, self.env, node=f"{self.worker_node}@%h", log_level="WARNING")
        component.argv += QUICK_WORKER
        return self.start_component(component)

    def start_orchestrator(self, name: str = "orchestrator") -> Proc:
        return self.start_component(orchestrator_component(self.env), name)

    def start_history_writer(self) -> Proc:
        return self.start_component(history_writer_component(self.env))

    def start_web(self) -> None:
        """daphne on the stack's port, as the web tier runs it; the socket is the process's alone, so
        a stopped web process refuses connections as a dead server does."""
        sock = listening_socket("127.0.0.1", self.port)
        try:
            (component,) = web_components(sock, 1, env=self.env)
            self.start_component(component)
        finally:
            sock.close()
        wait_for(component.ready, timeout=60, interval=0.1, what="web up")

    def history_written(self) -> None:
        history_written(self.redis.url)

    def logs(self, tail: int = 6000) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-tail:]}" for log in self.tmp.glob("*.log"))

    def reset(self) -> None:
        """Leave the stack as a fresh one for the next test (a stack shared by several: SharedStack):
        its processes all up, the test's deployments stopped and their history written."""
        self.assert_running()
        names = [deployment["name"] for deployment in self.deployments()]
        for name in names:
            self.stop_deployment(name)
        stopped = lambda: all(deployment["state"] == "STOPPED" for deployment in self.deployments())  # noqa: E731
        wait_for(stopped, timeout=60, interval=0.1, what=f"{', '.join(names)} STOPPED")
        if "history" in self.procs:
            self.history_written()

    def deployments(self) -> list[dict]:
        """The deployments as GET /api/deployments/ lists them (a shared stack's subclass says how)."""
        raise NotImplementedError(f"{type(self).__name__} is not shared between tests")

    def stop_deployment(self, name: str) -> None:
        raise NotImplementedError(f"{type(self).__name__} is not shared between tests")

    def assert_running(self) -> None:
        """Every process and Redis still up (a test that stopped one started it again)."""
        stopped = [name for name, proc in self.procs.items() if proc.process.poll() is not None]
        if self.redis.process is None or self.redis.process.poll() is not None:
            stopped.append("redis")
        assert not stopped, f"stopped: {', '.join(stopped)}"

    def stop_processes(self) -> None:
        stop_together(list(self.procs.values()))
        self.redis.stop()


class KeyedStack(LiveStack):
    """A stack driven through REST with the API keys of the test using it (`use_keys`): an operator's
    (deployments) and a plain user's (inference)."""

    operator_secret = ""
    user_secret = ""

    def use_keys(self, operator_secret: str, user_secret: str) -> None:
        self.operator_secret = operator_secret
        self.user_secret = user_secret

    def http(self, method: str, path: str, secret: str | None = None, **kwargs) -> httpx.Response:
        headers = {"Authorization": f"Bearer {secret or self.user_secret}", **kwargs.pop("headers", {})}
        return httpx.request(method, f"{self.base}{path}", headers=headers, timeout=kwargs.pop("timeout", 60), **kwargs)

    def deployments(self) -> list[dict]:
        response = self.http("GET", "/api/deployments/", secret=self.operator_secret)
        assert response.status_code == 200, response.text
        return response.json()

    def stop_deployment(self, name: str) -> None:
        self.http("POST", f"/api/deployments/{name}/stop/", secret=self.operator_secret)


class SharedStack:
    """One live stack for consecutive tests, started by the first test that asks for it: the processes
    start once, not per test. A test whose environment differs (a module that overrides
    `platform_env`) gets a stack of its own environment, shared in turn by the tests after it with the
    same one. Between tests `release` runs the stack's `reset` (it stops that test's deployments, waits
    until they are stopped and their history written, so the next test's database holds nothing they
    still use); a stack that fails to reset is stopped, and the next test starts a fresh one.

    An idle stack is stopped before any other test that may commit to the database
    (`close_idle_stacks`): its orchestrator reconciles every deployment it finds there."""

    open_stacks: ClassVar[list[SharedStack]] = []

    def __init__(self, start: Callable[[dict[str, str]], LiveStack]):
        self.start = start
        self.stack: LiveStack | None = None
        self.env: dict[str, str] | None = None

    def acquire(self, env: dict[str, str], request: pytest.FixtureRequest | None = None) -> LiveStack:
        """The stack for `env`; a fresh one for a test marked `fresh_platform`."""
        fresh = request is not None and request.node.get_closest_marker("fresh_platform") is not None
        if self.stack is not None and (fresh or self.env != env):
            self.close()
        if self.stack is None:
            self.stack = self.start(dict(env))
            self.env = dict(env)
            SharedStack.open_stacks.append(self)
        return self.stack

    def release(self) -> None:
        try:
            self.stack.reset()
        except Exception as error:
            print(f"the shared stack did not reset ({error!r}): the next test starts a fresh one")
            self.close()

    def close(self) -> None:
        if self.stack is not None:
            self.stack.stop_processes()
            self.stack = None
            SharedStack.open_stacks.remove(self)


def close_idle_stacks(next_test: pytest.Item | None) -> None:
    """After a test: stop each shared stack the next test does not use if that test may commit rows
    (an idle stack's orchestrator would reconcile its deployments); a test in a transaction that is
    rolled back, or with no database, runs beside an idle stack."""
    if next_test is not None and not commits_to_the_database(next_test):
        return
    used = shared_stacks_of(next_test) if next_test is not None else set()
    for shared in list(SharedStack.open_stacks):
        if id(shared) not in used:
            shared.close()


def commits_to_the_database(test: pytest.Item) -> bool:
    marker = test.get_closest_marker("django_db")
    transactional = marker is not None and (marker.kwargs.get("transaction") or marker.kwargs.get("reset_sequences"))
    names = set(getattr(test, "fixturenames", ()))
    return bool(transactional) or bool({"transactional_db", "live_server", "django_db_reset_sequences"} & names)


def shared_stacks_of(test: pytest.Item) -> set[int]:
    """The ids of the shared stacks the test's fixtures hold (session fixtures computed already)."""
    info = getattr(test, "_fixtureinfo", None)
    definitions = info.name2fixturedefs.values() if info is not None else ()
    held = set()
    for fixturedefs in definitions:
        for fixturedef in fixturedefs:
            cached = getattr(fixturedef, "cached_result", None)
            if cached is not None and isinstance(cached[0], SharedStack):
                held.add(id(cached[0]))
    return held
