"""Starts a replica host as a separate process, at most one per replica id on this machine.

The host is a fresh interpreter (`python -m workers.replica_host`), never a fork of the
Celery child: CUDA does not survive fork, and the engine must outlive any one task. It
runs in its own session, so signals aimed at the worker's process group do not hit it;
it watches the worker's main pid and exits with it instead. A replica placed on `cuda:N` sees
only that GPU (workers/device_pinning.py).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import msgspec
import redis

from stages.protocol import ReplicaSpec
from workers.device_pinning import pinned_environment
from workers.processes import HOST_MODULE, replica_host_pids
from workers.replica_status import read_status, serving_host

log = logging.getLogger(__name__)

IMPORT_ROOT = Path(__file__).resolve().parent.parent
"""The directory `workers` is imported from: the host's working directory, so `-m` finds it."""


@dataclass
class Launch:
    replica_id: str
    started: bool
    pid: int | None = None
    reason: str = ""


def launch_replica_host(spec: ReplicaSpec, redis_url: str, client: redis.Redis, parent_pid: int) -> Launch:
    """Start the host for `spec` unless one already serves that replica (here, or anywhere per its heartbeat)."""
    with _machine_lock(spec.replica_id):
        pids = replica_host_pids(spec.replica_id)
        if pids:
            return Launch(
                spec.replica_id, started=False, pid=pids[0], reason=f"a host runs here already (pid {pids[0]})"
            )
        owner = serving_host(read_status(client, spec.replica_id), spec.replica_id)
        if owner is not None:
            return Launch(spec.replica_id, started=False, reason=f"served by {owner}")
        seconds, micros = client.time()
        process = subprocess.Popen(
            host_argv(spec, redis_url, parent_pid, drains_after_ms=seconds * 1000 + micros // 1000),
            cwd=IMPORT_ROOT,
            env={**os.environ, **pinned_environment(spec.device, os.environ)},
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        threading.Thread(target=_reap, args=(spec.replica_id, process), daemon=True).start()
        return Launch(spec.replica_id, started=True, pid=process.pid)


def host_argv(spec: ReplicaSpec, redis_url: str, parent_pid: int | None, drains_after_ms: int | None = None) -> list:
    argv = [
        sys.executable,
        "-m",
        HOST_MODULE,
        "--spec-json",
        msgspec.json.encode(spec).decode(),
        "--redis-url",
        redis_url,
    ]
    if parent_pid is not None:
        argv += ["--parent-pid", str(parent_pid)]
    if drains_after_ms is not None:
        argv += ["--drains-after-ms", str(drains_after_ms)]
    return argv


@contextmanager
def _machine_lock(replica_id: str) -> Iterator[None]:
    """Serialises check-and-start of one replica across the worker's pool processes."""
    directory = Path(tempfile.gettempdir()) / "omnistage-replicas"
    directory.mkdir(parents=True, exist_ok=True)
    safe_name = re.sub(r"[^A-Za-z0-9_.-]", "_", replica_id)
    with open(directory / f"{safe_name}.lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _reap(replica_id: str, process: subprocess.Popen) -> None:
    """Wait for the host so it leaves no zombie, and log how it ended."""
    code = process.wait()
    log.info("replica %s: host pid %d exited with code %d", replica_id, process.pid, code)
