"""Starts a replica host as a separate process, at most one per replica id on this machine.

The host is never a fork of the Celery child: CUDA does not survive fork, and the engine must
outlive any one task. A replica of a torch family on the CPU is forked from the worker's host
zygote (`workers.host_zygote`, which has imported torch and transformers once: seconds of CPU
saved per start); any other, or any when no zygote can be had, starts as a fresh interpreter
(`python -m workers.replica_host`); `OMNISTAGE_HOST_ZYGOTE=0` starts every host that way. Either
way the host has the same command line, runs in its own session, so signals aimed at the
worker's process group do not hit it, and watches the worker's main pid and exits with it. A
replica placed on `cuda:N` sees only that GPU (workers/device_pinning.py).
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import msgspec
import redis

from stages.models import get_family
from stages.protocol import ReplicaSpec
from workers import zygote_spawn
from workers.device_pinning import pinned_environment
from workers.file_lock import file_lock
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
        argv = host_argv(spec, redis_url, parent_pid, drains_after_ms=seconds * 1000 + micros // 1000)
        env = {**os.environ, **pinned_environment(spec.device, os.environ)}
        pid = zygote_spawn.spawn(argv, env, IMPORT_ROOT, parent_pid) if forks_from_zygote(spec) else None
        if pid is None:
            process = subprocess.Popen(argv, cwd=IMPORT_ROOT, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
            threading.Thread(target=_reap, args=(spec.replica_id, process), daemon=True).start()
            pid = process.pid
        return Launch(spec.replica_id, started=True, pid=pid)


def forks_from_zygote(spec: ReplicaSpec) -> bool:
    """Whether the host forks from the worker's zygote: a torch family on the CPU, unless turned off."""
    if os.environ.get("OMNISTAGE_HOST_ZYGOTE", "1") == "0":
        return False
    if (spec.device or spec.stage_deploy.device) != "cpu":
        return False
    try:
        return get_family(spec.family).uses_torch
    except Exception:  # an unknown family: the host reports the error itself
        return False


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


def _machine_lock(replica_id: str):
    """Serialises check-and-start of one replica across the worker's pool processes."""
    directory = Path(tempfile.gettempdir()) / "omnistage-replicas"
    directory.mkdir(parents=True, exist_ok=True)
    return file_lock(directory / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', replica_id)}.lock")


def _reap(replica_id: str, process: subprocess.Popen) -> None:
    """Wait for the host so it leaves no zombie, and log how it ended."""
    code = process.wait()
    log.info("replica %s: host pid %d exited with code %d", replica_id, process.pid, code)
