"""Connectors move large payloads between stages: inline (small), shared memory (same
host), Redis keys with a TTL (across hosts). Chosen per payload by size and locality;
they never decide routing."""

from stages.connectors.base import Connector
from stages.connectors.choice import INLINE_MAX_BYTES, choose_connector
from stages.connectors.inline import InlineConnector
from stages.connectors.redis_store import RedisConnector
from stages.connectors.shared_memory import SharedMemoryConnector, sweep
from stages.connectors.transfers import Connectors, Transfer, resolve

__all__ = [
    "INLINE_MAX_BYTES",
    "Connector",
    "Connectors",
    "InlineConnector",
    "RedisConnector",
    "SharedMemoryConnector",
    "Transfer",
    "choose_connector",
    "resolve",
    "sweep",
]
