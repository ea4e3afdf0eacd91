"""Same-host payloads in POSIX shared memory (`/dev/shm`), one segment per payload.

The writer creates the segment and stops tracking it (so its exit does not unlink it).
Who frees it:
- its reader, once it no longer needs it (the replica host: after acknowledging the input
  that carried it, so a redelivery after a crash can still read it; `consume=True`
  readers unlink right after reading);
- its writer, when told nobody will read it (`Release`: the request ended first);
- `sweep(max_age_s)`, for segments whose reader or writer died: every worker host runs it.

Segment names carry the writer's replica id (`omnistage_<owner>_<uuid>`), so one
replica's segments can be listed (`owned_segments`).
"""

from __future__ import annotations

import os
import re
import time
import uuid
from multiprocessing import resource_tracker, shared_memory
from pathlib import Path

from stages.connectors.base import Connector
from stages.errors import StageFailure
from stages.protocol import Payload, PayloadRef, Tensor

PREFIX = "omnistage_"
SHM_DIR = Path("/dev/shm")
_UNSAFE = re.compile(r"[^A-Za-z0-9-]")


class SharedMemoryConnector(Connector):
    name = "shm"

    def __init__(self, *, consume: bool = True, host: str = "", owner: str = ""):
        self.consume = consume
        """Unlink a segment once read (each payload has one reader)."""
        self.host = host
        self.owner = owner

    def put(self, tensor: Tensor) -> Payload:
        key = f"{segment_prefix(self.owner)}{uuid.uuid4().hex}"
        segment = shared_memory.SharedMemory(name=key, create=True, size=max(1, tensor.nbytes))
        try:
            segment.buf[: tensor.nbytes] = tensor.data
        finally:
            segment.close()
        _untrack(segment)
        return PayloadRef(
            connector="shm",
            key=key,
            nbytes=tensor.nbytes,
            dtype=tensor.dtype,
            shape=list(tensor.shape),
            host=self.host,
            owner=self.owner,
        )

    def get(self, payload: Payload) -> Tensor:
        if not isinstance(payload, PayloadRef) or payload.connector != "shm":
            raise StageFailure("the shared-memory connector reads only shm handles")
        data = read_segment(payload.key, payload.nbytes)
        if self.consume:
            self.delete(payload)
        return Tensor(dtype=payload.dtype, shape=list(payload.shape), data=data)

    def delete(self, payload: Payload) -> None:
        if isinstance(payload, PayloadRef):
            unlink_segment(payload.key)


def segment_prefix(owner: str = "") -> str:
    return f"{PREFIX}{_UNSAFE.sub('-', owner)}_" if owner else PREFIX


def read_segment(key: str, nbytes: int) -> bytes:
    try:
        segment = shared_memory.SharedMemory(name=key)
    except FileNotFoundError:
        raise StageFailure(f"shared-memory payload {key} is gone (read twice, or swept)") from None
    try:
        return bytes(segment.buf[:nbytes])
    finally:
        segment.close()
        _untrack(segment)


def unlink_segment(key: str) -> bool:
    """Remove a segment; False when it was gone already."""
    if not key.startswith(PREFIX) or "/" in key:
        return False  # only ever our own segments
    try:
        os.unlink(SHM_DIR / key)
    except FileNotFoundError:
        return False
    return True


def owned_segments(owner: str) -> list[Path]:
    """The segments a replica wrote that nobody has freed yet."""
    return sorted(SHM_DIR.glob(f"{segment_prefix(owner)}*"))


def sweep(max_age_s: float) -> int:
    """Remove our segments older than `max_age_s`; returns how many."""
    removed = 0
    cutoff = time.time() - max_age_s
    for path in SHM_DIR.glob(f"{PREFIX}*"):
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
                removed += 1
        except FileNotFoundError:
            continue
    return removed


def _untrack(segment: shared_memory.SharedMemory) -> None:
    """Python's resource tracker would unlink the segment when this process exits."""
    try:
        resource_tracker.unregister(segment._name, "shared_memory")  # noqa: SLF001
    except Exception:
        pass
