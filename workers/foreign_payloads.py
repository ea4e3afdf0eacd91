"""Reading a shared-memory payload that was written on another host.

Its segment lives in the writer's /dev/shm, which this host cannot map. The reader asks
the writer, with an `Export` entry on the writer replica's input stream, to copy it into
Redis under `streams.payload(key)`, and waits for it there for a bounded time. When the
writer has stopped (no heartbeat) or does not answer in time, the request that carried
the payload fails with an error naming the host; nothing waits forever.
"""

from __future__ import annotations

import time

import redis

from stages import streams
from stages.errors import StageFailure
from stages.protocol import Export, PayloadRef, Tensor, encode

EXPORT_WAIT_S = 10.0
"""Longest wait for a writer to export a payload (it reads its input between engine steps)."""
LONGEST_PAUSE_S = 0.05


class ForeignPayloads:
    def __init__(self, client: redis.Redis, *, wait_s: float = EXPORT_WAIT_S):
        self.client = client
        self.wait_s = wait_s

    def fetch(self, payload: PayloadRef) -> Tensor:
        key = streams.payload(payload.key)
        data = self.client.get(key)  # exported already (a redelivered input)
        if data is None:
            self._ask_writer(payload)
            data = self._wait_for(key, payload)
        return Tensor(dtype=payload.dtype, shape=list(payload.shape), data=bytes(data))

    def _ask_writer(self, payload: PayloadRef) -> None:
        if not payload.owner:
            raise StageFailure(f"shared-memory payload {payload.key} is on host {payload.host!r} and names no writer")
        message = encode(Export(payloads=[payload]))
        self.client.xadd(streams.replica_input(payload.owner), {"kind": "export", "data": message})

    def _wait_for(self, key: str, payload: PayloadRef) -> bytes:
        deadline = time.monotonic() + self.wait_s
        pause = 0.001
        while time.monotonic() < deadline:
            data = self.client.get(key)
            if data is not None:
                return data
            if not self.client.exists(streams.replica_heartbeat(payload.owner)):
                break  # the writer stopped: the segment can only be read on its host now
            time.sleep(pause)
            pause = min(pause * 2, LONGEST_PAUSE_S)
        raise StageFailure(
            f"shared-memory payload {payload.key} stayed on host {payload.host!r}: its writer, replica "
            f"{payload.owner}, did not export it to Redis within {self.wait_s:g} s (it may have stopped)"
        )
