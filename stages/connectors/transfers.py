"""All connectors of one process behind one `put` / `get`, with a record of every transfer."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from stages.connectors.base import Connector
from stages.connectors.choice import INLINE_MAX_BYTES, choose_connector
from stages.connectors.inline import InlineConnector
from stages.connectors.redis_store import RedisConnector
from stages.connectors.shared_memory import SharedMemoryConnector
from stages.errors import StageFailure
from stages.protocol import Payload, PayloadRef, StageOutput, StageRequest, Tensor
from stages.tensors import to_numpy, to_wire


@dataclass(frozen=True)
class Transfer:
    connector: str
    direction: str
    """"put" or "get"."""
    nbytes: int
    seconds: float


@dataclass
class Connectors:
    """`put(array_or_tensor, same_host=..., preference=...)` and `get(payload)` over every
    available connector. Redis is available when a client is given."""

    redis_client: Any = None
    redis_ttl_s: float = 300.0
    redis_consume: bool = True
    """Delete a Redis payload on first read; False keeps it until its TTL (at-least-once readers)."""
    inline_max_bytes: int = INLINE_MAX_BYTES
    transfers: list[Transfer] = field(default_factory=list)
    max_records: int = 10_000

    def __post_init__(self) -> None:
        self._by_name: dict[str, Connector] = {"inline": InlineConnector(), "shm": SharedMemoryConnector()}
        if self.redis_client is not None:
            self._by_name["redis"] = RedisConnector(
                self.redis_client, ttl_s=self.redis_ttl_s, consume=self.redis_consume
            )

    def put(self, payload: Any, *, same_host: bool = True, preference: str = "auto") -> Payload:
        tensor = payload if isinstance(payload, Tensor) else to_wire(payload)
        name = choose_connector(tensor.nbytes, same_host, preference, self.inline_max_bytes)
        started = time.perf_counter()
        handle = self._connector(name).put(tensor)
        self._record(name, "put", tensor.nbytes, time.perf_counter() - started)
        return handle

    def get(self, payload: Payload) -> Tensor:
        name = "inline" if isinstance(payload, Tensor) else payload.connector
        started = time.perf_counter()
        tensor = self._connector(name).get(payload)
        self._record(name, "get", tensor.nbytes, time.perf_counter() - started)
        return tensor

    def offload(
        self, payloads: dict[str, Payload], *, same_host: bool = True, preference: str = "auto"
    ) -> dict[str, Payload]:
        """Payloads of a message about to leave the process: large tensors become handles."""
        return {
            key: self.put(value, same_host=same_host, preference=preference) if isinstance(value, Tensor) else value
            for key, value in payloads.items()
        }

    def load(self, payloads: dict[str, Payload]) -> dict[str, Tensor]:
        """Payloads of a received message, every handle read back into a tensor."""
        return {key: value if isinstance(value, Tensor) else self.get(value) for key, value in payloads.items()}

    def offload_output(self, output: StageOutput, *, same_host: bool = True, preference: str = "auto") -> StageOutput:
        if not output.payloads:
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

    def stats(self) -> dict[str, dict[str, float]]:
        """Per connector and direction: count, bytes, seconds."""
        totals: dict[str, dict[str, float]] = {}
        for record in self.transfers:
            entry = totals.setdefault(
                f"{record.connector}.{record.direction}", {"count": 0, "bytes": 0, "seconds": 0.0}
            )
            entry["count"] += 1
            entry["bytes"] += record.nbytes
            entry["seconds"] += record.seconds
        return totals

    def _connector(self, name: str) -> Connector:
        if name not in self._by_name:
            raise StageFailure(f"no {name!r} connector here (Redis needs a client)")
        return self._by_name[name]

    def _record(self, name: str, direction: str, nbytes: int, seconds: float) -> None:
        self.transfers.append(Transfer(name, direction, nbytes, seconds))
        if len(self.transfers) > self.max_records:
            del self.transfers[: len(self.transfers) - self.max_records]


def resolve(payload: Payload, connectors: Connectors | None = None) -> np.ndarray:
    """A payload's array (numpy), reading it through a connector when it is a handle."""
    if isinstance(payload, Tensor):
        return to_numpy(payload)
    if isinstance(payload, PayloadRef) and payload.connector == "shm" and connectors is None:
        return to_numpy(SharedMemoryConnector().get(payload))
    if connectors is None:
        raise StageFailure(f"a {payload.connector} payload needs a Connectors instance to be read")
    return to_numpy(connectors.get(payload))
