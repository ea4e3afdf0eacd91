"""Client-visible payloads of StageOutputs as numpy arrays or bytes.

Payloads arrive inline (`Tensor`) or, when large, as a Redis connector handle
(`PayloadRef(connector="redis")`) that we read once. Shared-memory handles cannot cross
to the web process, so a stage that emits them for the client is misconfigured.
"""

from __future__ import annotations

import numpy as np
import redis.asyncio

from stages.protocol import Payload, PayloadRef, Tensor


class PayloadUnavailable(Exception):
    pass


async def resolve(payload: Payload, client: redis.asyncio.Redis | None) -> Tensor:
    if isinstance(payload, Tensor):
        return payload
    if isinstance(payload, PayloadRef) and payload.connector == "redis" and client is not None:
        data = await client.getdel(payload.key)
        if data is None:
            raise PayloadUnavailable(f"payload {payload.key} expired before the API read it")
        return Tensor(dtype=payload.dtype, shape=list(payload.shape), data=bytes(data))
    raise PayloadUnavailable(f"a {payload.connector!r} payload handle cannot be read by the API process")


def as_array(tensor: Tensor) -> np.ndarray:
    if tensor.dtype == "bfloat16":
        widened = np.frombuffer(tensor.data, dtype="<u2").astype(np.uint32) << 16
        return widened.view(np.float32).reshape(tensor.shape)
    return np.frombuffer(tensor.data, dtype=np.dtype(tensor.dtype).newbyteorder("<")).reshape(tensor.shape)


def as_bytes(tensor: Tensor) -> bytes:
    return tensor.data


def audio_samples(tensor: Tensor) -> np.ndarray:
    """Mono float32 samples (a [channels, n] or [n, channels] array is averaged down)."""
    array = as_array(tensor).astype(np.float32, copy=False)
    if array.ndim == 2:
        array = array.mean(axis=0 if array.shape[0] < array.shape[1] else 1)
    return array.reshape(-1)
