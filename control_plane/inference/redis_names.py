"""Redis names of the request history's write-behind log (history_log.py) and its writers.

They live under `stages.streams.PREFIX` like every other Omnistage key. Tests isolate
themselves by setting `HISTORY_REDIS_PREFIX` (read at call time, not import time).
"""

from __future__ import annotations

from django.conf import settings

from stages import streams


def prefix() -> str:
    """Read at call time, so a test can isolate itself by setting HISTORY_REDIS_PREFIX."""
    return getattr(settings, "HISTORY_REDIS_PREFIX", None) or f"{streams.PREFIX}:history"


def stream_name() -> str:
    return f"{prefix()}:stream"


def row_key(request_id: str) -> str:
    return f"{prefix()}:rows:{request_id}"


def pending_all() -> str:
    return f"{prefix()}:pending"


def pending_of_user_prefix() -> str:
    return f"{prefix()}:pending-user:"


def sequence() -> str:
    return f"{prefix()}:seq"


def serving_leases() -> str:
    """Sorted set: request id of a running row -> when the process serving it last said so."""
    return f"{prefix()}:serving"


def history_writer_heartbeat(consumer: str) -> str:
    return f"{prefix()}:hb:{consumer}"


def history_writer_heartbeat_pattern() -> str:
    return f"{prefix()}:hb:*"
