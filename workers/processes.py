"""Processes on this machine: is a pid alive, which replica hosts run here.

Read from /proc so a Celery worker can answer "does replica X already run here?" without
any state of its own (a restarted worker, or another pool child, sees the same answer).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

HOST_MODULE = "workers.replica_host"


def pid_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie counts as gone: it has exited, only its parent has not reaped it)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def replica_id_of(argv: list[str]) -> str | None:
    """The replica id a `python -m workers.replica_host --spec-json ...` command line serves."""
    if HOST_MODULE not in argv or "--spec-json" not in argv:
        return None
    index = argv.index("--spec-json") + 1
    if index >= len(argv):
        return None
    try:
        return json.loads(argv[index]).get("replica_id")
    except (ValueError, AttributeError):
        return None


def argv_of(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def replica_host_pids(replica_id: str) -> list[int]:
    """Pids of the live replica host processes on this machine that serve `replica_id`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if replica_id_of(argv_of(pid)) == replica_id and pid_alive(pid):
            pids.append(pid)
    return sorted(pids)


def is_replica_host(pid: int, replica_id: str) -> bool:
    """Whether `pid` is a live replica host of `replica_id` (guards against a recycled pid)."""
    return pid_alive(pid) and replica_id_of(argv_of(pid)) == replica_id
