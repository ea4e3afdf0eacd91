"""Starting a CPU replica host as a fork of this worker's host zygote (`workers.host_zygote`).

`spawn(argv, env, cwd, worker_pid)` asks the zygote of the Celery worker `worker_pid` for a host
and returns its pid, or None when the caller must start the host itself (no zygote could be
started or reached: a host then starts as a fresh interpreter, as without one). The first call
starts the zygote and waits for it to finish its imports (seconds, once per worker); calls from
the worker's other pool processes meanwhile wait on the same start.

One zygote per worker and pid namespace: its socket lives in a directory only this user can
open, named after the worker's pid and the pid namespace (two hosts sharing /tmp, such as
containers or the tests' network-namespace hosts, each get their own).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from workers.file_lock import file_lock
from workers.host_zygote import ROOM_BYTES

log = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0
"""How long a zygote may take to import what it preloads (seconds on a busy machine)."""
REPLY_TIMEOUT_S = 15.0
RETRY_AFTER_S = 300.0
"""After a zygote failed to start, hosts start as fresh interpreters this long before another try."""
MAX_SOCKET_PATH = 100
"""Bytes of a Unix socket's path the kernel takes (108 with its terminator, less on some systems)."""


def spawn(argv: list[str], env: dict[str, str], cwd: Path, worker_pid: int) -> int | None:
    path = socket_path(worker_pid)
    if len(os.fsencode(path)) > MAX_SOCKET_PATH or time.monotonic() < _failed_until.get(path, 0.0):
        return None
    reply = _ask_or_start(path, argv, env, cwd, worker_pid)
    if reply is None:
        return None
    if "pid" not in reply:
        log.warning("host zygote %s refused: %s", path, reply.get("error"))
        return None
    return int(reply["pid"])


_failed_until: dict[Path, float] = {}


class _NotListening(Exception):
    """No zygote listens on the socket (none was started, or it died)."""


def _ask_or_start(path: Path, argv: list[str], env: dict[str, str], cwd: Path, worker_pid: int) -> dict | None:
    """The zygote's answer, after starting it if none listens (once for all pool processes: the first
    starts it under the lock, the others find it listening)."""
    try:
        return _ask(path, argv, env, cwd)
    except _NotListening:
        pass
    with file_lock(path.with_suffix(".lock")):
        try:
            return _ask(path, argv, env, cwd)
        except _NotListening:
            pass
        if not _start(path, worker_pid, cwd):
            _failed_until[path] = time.monotonic() + RETRY_AFTER_S
            return None
        try:
            return _ask(path, argv, env, cwd)
        except _NotListening:  # it died as it started
            return None


def socket_path(worker_pid: int) -> Path:
    directory = Path(tempfile.gettempdir()) / f"omnistage-zygotes-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    return directory / f"{os.stat('/proc/self/ns/pid').st_ino}-{worker_pid}.sock"


def _ask(path: Path, argv: list[str], env: dict[str, str], cwd: Path) -> dict | None:
    """The zygote's answer to one request; None when it did not answer in time."""
    request = json.dumps({"argv": argv, "env": env, "cwd": str(cwd)}).encode() + b"\n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(REPLY_TIMEOUT_S)
        try:
            connection.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError) as error:
            raise _NotListening from error
        try:
            connection.sendall(request)
            data = b""
            while not data.endswith(b"\n"):
                chunk = connection.recv(4096)
                if not chunk:
                    return None
                data += chunk
        except OSError:
            return None
    return json.loads(data)


def _start(path: Path, worker_pid: int, cwd: Path) -> bool:
    """Start the zygote and wait until it listens; False if it could not start."""
    path.unlink(missing_ok=True)  # a socket file left by a zygote that died
    argv = [sys.executable, "-m", "workers.host_zygote", "--socket", str(path), "--parent-pid", str(worker_pid),
            "--room", "." * ROOM_BYTES]  # fmt: skip
    process = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL)
    threading.Thread(target=process.wait, daemon=True).start()  # reaped when it exits, with the worker
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if path.exists():
            return True
        if process.poll() is not None:
            log.warning("host zygote exited with code %s while starting: hosts start as fresh interpreters",
                        process.returncode)  # fmt: skip
            return False
        time.sleep(0.05)
    log.warning("host zygote not ready after %.0f s: hosts start as fresh interpreters", START_TIMEOUT_S)
    process.kill()
    return False
