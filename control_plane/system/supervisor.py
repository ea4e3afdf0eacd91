"""Starts, watches and stops the local processes of the embedded platform.

Each component runs in its own process group with its output prefixed by its name.
A component marked `restart` (the orchestrator, the worker pool, the history writer: their
state lives in Redis and the database) is started again when it exits, and the supervisor says
so; one that exits more than `max_restarts` times within `restart_window_s`, or any other
component that exits, makes the supervisor say which and why, stop the others, and exit non-zero. SIGINT/SIGTERM stop everything, children first
with SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


class StartupError(RuntimeError):
    pass


@dataclass
class Component:
    name: str
    argv: list[str]
    ready: Callable[[], bool]
    ready_timeout_s: float = 60.0
    env: dict[str, str] = field(default_factory=dict)
    pass_fds: tuple[int, ...] = ()  # descriptors the process inherits (the web tier's listening socket)
    restart: bool = False
    process: subprocess.Popen | None = None
    restarts: list[float] = field(default_factory=list)


class Supervisor:
    def __init__(self, *, out=None, grace_s: float = 10.0, max_restarts: int = 5, restart_window_s: float = 60.0):
        self.components: list[Component] = []
        self.out = out or sys.stdout
        self.grace_s = grace_s
        self.max_restarts = max_restarts
        self.restart_window_s = restart_window_s
        self._stopping = threading.Event()
        self._print_lock = threading.Lock()

    def say(self, name: str, line: str) -> None:
        with self._print_lock:
            self.out.write(f"[{name:>12}] {line}\n")
            self.out.flush()

    def start(self, component: Component) -> None:
        self.start_group([component])

    def start_group(self, components: list[Component]) -> None:
        """Start the components side by side, then wait until each is ready."""
        for component in components:
            self._launch(component)
        for component in components:
            self._wait_ready(component)
            self.say(component.name, f"ready (pid {component.process.pid})")

    def _launch(self, component: Component) -> None:
        self._spawn(component)
        self.components.append(component)

    def _spawn(self, component: Component) -> None:
        self.say(component.name, "starting: " + " ".join(component.argv))
        component.process = subprocess.Popen(
            component.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **component.env},
            start_new_session=True,
            text=True,
            bufsize=1,
            pass_fds=component.pass_fds,
        )
        threading.Thread(target=self._relay, args=(component,), daemon=True).start()

    def _relay(self, component: Component) -> None:
        assert component.process and component.process.stdout
        for line in component.process.stdout:
            self.say(component.name, line.rstrip("\n"))

    def _wait_ready(self, component: Component) -> None:
        deadline = time.monotonic() + component.ready_timeout_s
        while time.monotonic() < deadline:
            if self._stopping.is_set():
                raise StartupError("interrupted during start-up")
            code = component.process.poll()
            if code is not None:
                raise StartupError(f"{component.name} exited with code {code} during start-up (see its log above)")
            try:
                if component.ready():
                    return
            except Exception:  # not ready yet: connection refused and the like
                pass
            time.sleep(0.25)
        raise StartupError(f"{component.name} was not ready within {component.ready_timeout_s:.0f} s")

    def watch(self) -> int:
        """Block until a component exits that is not restarted (returns 1) or a stop was requested
        (returns 0); restart those marked `restart` meanwhile."""
        while not self._stopping.wait(0.5):
            for component in self.components:
                code = component.process.poll()
                if code is None:
                    continue
                if not self._may_restart(component):
                    self.say("supervisor", f"{component.name} exited with code {code}; stopping everything")
                    return 1
                component.process.wait()
                self.say("supervisor", f"{component.name} exited with code {code}; restarting it")
                self._spawn(component)
        return 0

    def _may_restart(self, component: Component) -> bool:
        """Within its budget: a component that keeps dying is a fault to report, not to hide."""
        if not component.restart:
            return False
        now = time.monotonic()
        component.restarts = [at for at in component.restarts if now - at < self.restart_window_s]
        if len(component.restarts) >= self.max_restarts:
            self.say("supervisor", f"{component.name} exited {len(component.restarts) + 1} times within "
                                   f"{self.restart_window_s:.0f} s")  # fmt: skip
            return False
        component.restarts.append(now)
        return True

    def request_stop(self, *_args) -> None:
        self._stopping.set()

    def stop_all(self) -> None:
        for component in reversed(self.components):
            self._signal(component, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for component in reversed(self.components):
            remaining = max(0.1, deadline - time.monotonic())
            try:
                component.process.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                self.say("supervisor", f"{component.name} did not stop in {self.grace_s:.0f} s; killing it")
            self._signal(component, signal.SIGKILL)
            component.process.wait()
        self.say("supervisor", "all components stopped")

    @staticmethod
    def _signal(component: Component, signum: int) -> None:
        try:
            os.killpg(component.process.pid, signum)
        except ProcessLookupError:
            pass
