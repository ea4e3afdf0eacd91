"""All connectors of one process behind one `put` / `get`, with a record of every transfer."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from stages import streams
from stages.connectors.base import PAYLOAD_TTL_S, Connector
from stages.connectors.choice import INLINE_MAX_BYTES, choose_connector
from stages.connectors.inline import InlineConnector
from stages.connectors.redis_store import RedisConnector
from stages.connectors.shared_memory import SharedMemoryConnector, read_segment, segment_prefix, unlink_segment
from stages.errors import StageFailure
from stages.protocol import Payload, PayloadRef, StageOutput, StageRequest, Tensor
from stages.tensors import to_numpy, to_wire

StaysOnHost = bool | Callable[[str], bool]
"""Whether a payload's reader runs on this host: one answer, or one per payload key."""


@dataclass(frozen=True)
class Transfer:
    connector: str
    direction: str
    """"put", "get", "free" (a segment unlinked), "export" (a segment copied into Redis for a
    reader elsewhere) or "fallback" (a segment of another host read through Redis)."""
    nbytes: int
    seconds: float


@dataclass
class Connectors:
    """`put(array_or_tensor, same_host=..., preference=...)` and `get(payload)` over every
    available connector. Redis is available when a client is given.

    `host` and `owner` stamp the shared-memory handles this process writes; a handle of
    another host goes to `fetch_foreign` (its bytes cannot be mapped here)."""

    redis_client: Any = None
    redis_ttl_s: float = PAYLOAD_TTL_S
    redis_consume: bool = True
    """Delete a Redis payload on first read; False keeps it until its TTL (at-least-once readers)."""
    shm_consume: bool = True
    """Unlink a segment on first read; False leaves that to `free` (at-least-once readers)."""
    host: str = ""
    owner: str = ""
    fetch_foreign: Callable[[PayloadRef], Tensor] | None = None
    inline_max_bytes: int = INLINE_MAX_BYTES
    transfers: list[Transfer] = field(default_factory=list)
    max_records: int = 10_000

    def __post_init__(self) -> None:
        self._shm = SharedMemoryConnector(consume=self.shm_consume, host=self.host, owner=self.owner)
        self._by_name: dict[str, Connector] = {"inline": InlineConnector(), "shm": self._shm}
        if self.redis_client is not None:
            self._by_name["redis"] = RedisConnector(
                self.redis_client, ttl_s=self.redis_ttl_s, consume=self.redis_consume
            )
        self._totals: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()  # stats() is read by the heartbeat thread

    # ------------------------------------------------------------------ moving bytes

    def put(self, payload: Any, *, same_host: bool = True, preference: str = "auto") -> Payload:
        tensor = payload if isinstance(payload, Tensor) else to_wire(payload)
        name = choose_connector(tensor.nbytes, same_host, preference, self.inline_max_bytes)
        started = time.perf_counter()
        handle = self._connector(name).put(tensor)
        self._record(name, "put", tensor.nbytes, time.perf_counter() - started)
        return handle

    def get(self, payload: Payload) -> Tensor:
        if self.is_foreign(payload):
            return self._get_foreign(payload)
        name = "inline" if isinstance(payload, Tensor) else payload.connector
        started = time.perf_counter()
        tensor = self._connector(name).get(payload)
        self._record(name, "get", tensor.nbytes, time.perf_counter() - started)
        return tensor

    def is_foreign(self, payload: Payload) -> bool:
        """A shared-memory handle written on another host than this one."""
        return (
            isinstance(payload, PayloadRef)
            and payload.connector == "shm"
            and bool(payload.host and self.host)
            and payload.host != self.host
        )

    def _get_foreign(self, payload: PayloadRef) -> Tensor:
        if self.fetch_foreign is None:
            raise StageFailure(f"shared-memory payload {payload.key} is on host {payload.host!r}, not here")
        started = time.perf_counter()
        tensor = self.fetch_foreign(payload)
        self._record("shm", "fallback", tensor.nbytes, time.perf_counter() - started)
        return tensor

    # ------------------------------------------------------------------ messages

    def offload(
        self, payloads: dict[str, Payload], *, same_host: StaysOnHost = True, preference: str = "auto"
    ) -> dict[str, Payload]:
        """Payloads of a message about to leave the process: large tensors become handles."""
        return {
            key: self.put(value, same_host=_stays(same_host, key), preference=preference)
            if isinstance(value, Tensor)
            else value
            for key, value in payloads.items()
        }

    def load(self, payloads: dict[str, Payload]) -> dict[str, Tensor]:
        """Payloads of a received message, every handle read back into a tensor."""
        return {key: value if isinstance(value, Tensor) else self.get(value) for key, value in payloads.items()}

    def offload_output(
        self, output: StageOutput, *, same_host: StaysOnHost = True, preference: str = "auto"
    ) -> StageOutput:
        if not any(isinstance(value, Tensor) for value in output.payloads.values()):
            return output
        return msgspec.structs.replace(
            output, payloads=self.offload(output.payloads, same_host=same_host, preference=preference)
        )

    def load_request(self, request: StageRequest) -> StageRequest:
        """The request with its payloads and `inputs_embeds` as tensors (for the engine)."""
        embeds = request.inputs_embeds
        if isinstance(embeds, PayloadRef):
            embeds = self.get(embeds)
        if embeds is request.inputs_embeds and not any(isinstance(v, PayloadRef) for v in request.payloads.values()):
            return request
        return msgspec.structs.replace(request, payloads=self.load(request.payloads), inputs_embeds=embeds)

    # ------------------------------------------------------------------ freeing

    def free_request(self, request: StageRequest) -> None:
        """Free the shared memory behind a received request's handles (it will not be read again).
        Redis payloads are left to their TTL: a client-visible one may have a second reader."""
        for payload in shm_handles(request):
            self.free(payload)

    def free(self, payload: PayloadRef) -> None:
        started = time.perf_counter()
        if self.is_foreign(payload):
            if self.redis_client is not None:
                self.redis_client.delete(streams.payload(payload.key))  # the copy its writer exported
            return
        if unlink_segment(payload.key):
            self._record("shm", "free", payload.nbytes, time.perf_counter() - started)

    def free_segments(self, keys: list[str]) -> None:
        """Unlink segments this process wrote (`Release`: nobody will read them)."""
        for key in keys:
            if key.startswith(self._shm_prefix()) and unlink_segment(key):
                self._record("shm", "free", 0, 0.0)

    def export_segments(self, payloads: list[PayloadRef]) -> int:
        """Copy segments this process wrote into Redis for a reader on another host, and unlink
        them; returns how many were still there."""
        if self.redis_client is None:
            raise StageFailure("exporting shared memory needs a Redis client")
        exported = 0
        for payload in payloads:
            if not payload.key.startswith(self._shm_prefix()):
                continue
            started = time.perf_counter()
            try:
                data = read_segment(payload.key, payload.nbytes)
            except StageFailure:
                continue  # freed or swept meanwhile: its reader gives up after its wait
            self.redis_client.set(streams.payload(payload.key), data, px=int(self.redis_ttl_s * 1000))
            unlink_segment(payload.key)
            self._record("shm", "export", payload.nbytes, time.perf_counter() - started)
            exported += 1
        return exported

    def _shm_prefix(self) -> str:
        return segment_prefix(self.owner)

    # ------------------------------------------------------------------ records

    def stats(self) -> dict[str, dict[str, float]]:
        """Per connector and direction (`shm.put`, `redis.get` …): count, bytes, seconds."""
        with self._lock:
            return {name: dict(totals) for name, totals in self._totals.items()}

    def _connector(self, name: str) -> Connector:
        if name not in self._by_name:
            raise StageFailure(f"no {name!r} connector here (Redis needs a client)")
        return self._by_name[name]

    def _record(self, name: str, direction: str, nbytes: int, seconds: float) -> None:
        with self._lock:
            totals = self._totals.setdefault(f"{name}.{direction}", {"count": 0, "bytes": 0, "seconds": 0.0})
            totals["count"] += 1
            totals["bytes"] += nbytes
            totals["seconds"] += seconds
        self.transfers.append(Transfer(name, direction, nbytes, seconds))
        if len(self.transfers) > self.max_records:
            del self.transfers[: len(self.transfers) - self.max_records]


def shm_handles(request: StageRequest) -> list[PayloadRef]:
    """The shared-memory handles a request carries."""
    values = [*request.payloads.values(), request.inputs_embeds]
    return [value for value in values if isinstance(value, PayloadRef) and value.connector == "shm"]


def output_shm_handles(output: StageOutput) -> list[PayloadRef]:
    return [value for value in output.payloads.values() if isinstance(value, PayloadRef) and value.connector == "shm"]


def _stays(same_host: StaysOnHost, key: str) -> bool:
    return same_host(key) if callable(same_host) else same_host


def resolve(payload: Payload, connectors: Connectors | None = None) -> np.ndarray:
    """A payload's array (numpy), reading it through a connector when it is a handle."""
    if isinstance(payload, Tensor):
        return to_numpy(payload)
    if isinstance(payload, PayloadRef) and payload.connector == "shm" and connectors is None:
        return to_numpy(SharedMemoryConnector().get(payload))
    if connectors is None:
        raise StageFailure(f"a {payload.connector} payload needs a Connectors instance to be read")
    return to_numpy(connectors.get(payload))
