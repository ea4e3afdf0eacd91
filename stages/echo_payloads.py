"""Test payloads of the echo stage: what it attaches to its outputs (option `payload_bytes`)
and the digest a downstream echo stage reports of what it received, so a test can check
that large tensors crossed a connector intact."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from stages.protocol import Payload, Tensor

PAYLOAD_KEY = "hidden"


def echo_payload(request_id: str, seq: int, nbytes: int) -> Tensor:
    """`nbytes` of a pattern that depends on the request and the output's seq."""
    start = zlib.crc32(f"{request_id}:{seq}".encode()) % 251
    data = ((np.arange(nbytes, dtype=np.int64) + start) % 251).astype(np.uint8)
    return Tensor(dtype="uint8", shape=[nbytes], data=data.tobytes())


@dataclass
class PayloadDigest:
    """Bytes and running CRC-32 of the payloads a request brought, in arrival order."""

    nbytes: int = 0
    crc32: int = 0

    def add(self, payloads: dict[str, Payload]) -> None:
        for value in payloads.values():
            if isinstance(value, Tensor):
                self.nbytes += value.nbytes
                self.crc32 = zlib.crc32(value.data, self.crc32)

    def as_params(self) -> dict[str, int]:
        return {"received_payload_bytes": self.nbytes, "received_payload_crc32": self.crc32}
