"""Same-host payloads in POSIX shared memory (`/dev/shm`), one segment per payload.

The sender creates the segment and stops tracking it (so its exit does not unlink it);
the receiver copies the bytes out and unlinks it. Segments nobody collected (a receiver
died) are removed by `sweep(max_age_s)`.
"""

from __future__ import annotations

import os
import time
import uuid
from multiprocessing import resource_tracker, shared_memory
from pathlib import Path

from stages.connectors.base import Connector
from stages.errors import StageFailure
from stages.protocol import Payload, PayloadRef, Tensor

PREFIX = "omnistage_"
SHM_DIR = Path("/dev/shm")


class SharedMemoryConnector(Connector):
    name = "shm"

    def __init__(self, *, consume: bool = True):
        self.consume = consume
        """Unlink a segment once read (each payload has one receiver)."""

    def put(self, tensor: Tensor) -> Payload:
        key = f"{PREFIX}{uuid.uuid4().hex}"
        segment = shared_memory.SharedMemory(name=key, create=True, size=max(1, tensor.nbytes))
        try:
            segment.buf[: tensor.nbytes] = tensor.data
        finally:
            segment.close()
        _untrack(segment)
        return PayloadRef(connector="shm", key=key, nbytes=tensor.nbytes, dtype=tensor.dtype, shape=list(tensor.shape))

    def get(self, payload: Payload) -> Tensor:
        if not isinstance(payload, PayloadRef) or payload.connector != "shm":
            raise StageFailure("the shared-memory connector reads only shm handles")
        try:
            segment = shared_memory.SharedMemory(name=payload.key)
        except FileNotFoundError:
            raise StageFailure(f"shared-memory payload {payload.key} is gone (read twice, or swept)") from None
        try:
            data = bytes(segment.buf[: payload.nbytes])
        finally:
            segment.close()
            _untrack(segment)
        if self.consume:
            self.delete(payload)
        return Tensor(dtype=payload.dtype, shape=list(payload.shape), data=data)

    def delete(self, payload: Payload) -> None:
        if isinstance(payload, PayloadRef):
            with _suppress_missing():
                os.unlink(SHM_DIR / payload.key)


def sweep(max_age_s: float) -> int:
    """Remove our segments older than `max_age_s`; returns how many."""
    removed = 0
    cutoff = time.time() - max_age_s
    for path in SHM_DIR.glob(f"{PREFIX}*"):
        with _suppress_missing():
            if path.stat().st_mtime < cutoff:
                path.unlink()
                removed += 1
    return removed


def _untrack(segment: shared_memory.SharedMemory) -> None:
    """Python's resource tracker would unlink the segment when this process exits."""
    try:
        resource_tracker.unregister(segment._name, "shared_memory")  # noqa: SLF001
    except Exception:
        pass


class _suppress_missing:  # noqa: N801
    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        return kind is FileNotFoundError
