"""Cross-host payloads as Redis keys with a TTL (a receiver that never comes leaves nothing)."""

from __future__ import annotations

import uuid

from stages import streams
from stages.connectors.base import Connector
from stages.errors import StageFailure
from stages.protocol import Payload, PayloadRef, Tensor


class RedisConnector(Connector):
    name = "redis"

    def __init__(self, client, *, ttl_s: float = 300.0, consume: bool = True):
        """`client` is a redis-py client (bytes responses). Keys are `stages.streams.payload(...)`."""
        self.client = client
        self.ttl_ms = int(ttl_s * 1000)
        self.consume = consume

    def put(self, tensor: Tensor) -> Payload:
        key = streams.payload(uuid.uuid4().hex)
        self.client.set(key, tensor.data, px=self.ttl_ms)
        return PayloadRef(
            connector="redis", key=key, nbytes=tensor.nbytes, dtype=tensor.dtype, shape=list(tensor.shape)
        )

    def get(self, payload: Payload) -> Tensor:
        if not isinstance(payload, PayloadRef) or payload.connector != "redis":
            raise StageFailure("the Redis connector reads only redis handles")
        data = self.client.getdel(payload.key) if self.consume else self.client.get(payload.key)
        if data is None:
            raise StageFailure(f"Redis payload {payload.key} is gone (expired after its TTL, or read twice)")
        return Tensor(dtype=payload.dtype, shape=list(payload.shape), data=bytes(data))

    def delete(self, payload: Payload) -> None:
        if isinstance(payload, PayloadRef):
            self.client.delete(payload.key)
