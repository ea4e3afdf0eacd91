"""Connectors move large payloads between stages: inline (small), shared memory (same
host), Redis keys with a TTL (across hosts). Chosen per payload by size and locality;
they never decide routing."""

from stages.connectors.base import PAYLOAD_TTL_S, Connector
from stages.connectors.choice import INLINE_MAX_BYTES, choose_connector, reader_is_local
from stages.connectors.inline import InlineConnector
from stages.connectors.redis_store import RedisConnector
from stages.connectors.shared_memory import SharedMemoryConnector, owned_segments, sweep
from stages.connectors.transfers import Connectors, Transfer, output_shm_handles, resolve, shm_handles

__all__ = [
    "INLINE_MAX_BYTES",
    "PAYLOAD_TTL_S",
    "Connector",
    "Connectors",
    "InlineConnector",
    "RedisConnector",
    "SharedMemoryConnector",
    "Transfer",
    "choose_connector",
    "output_shm_handles",
    "owned_segments",
    "reader_is_local",
    "resolve",
    "shm_handles",
    "sweep",
]
