"""The logs tail of a deployment page: the recent lines each replica host published to its
capped Redis stream (workers/log_stream.py writes them)."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from control_plane.redis_client import get_redis
from stages import streams

TAIL_LINES = 40


@dataclass
class ReplicaLog:
    replica: object
    lines: list[str]


def replica_log_tails(replicas, *, lines: int = TAIL_LINES) -> list[ReplicaLog] | None:
    """Each replica's last `lines` log lines, oldest first; None when Redis does not answer."""
    replicas = list(replicas)
    client = get_redis(timeout=1.0)
    try:
        pipe = client.pipeline(transaction=False)
        for replica in replicas:
            pipe.xrevrange(streams.replica_logs(str(replica.id)), count=lines)
        newest_first = pipe.execute()
    except redis.RedisError:
        return None
    finally:
        client.close()
    return [ReplicaLog(replica, [_text(fields) for _, fields in reversed(entries)])
            for replica, entries in zip(replicas, newest_first, strict=True)]  # fmt: skip


def _text(fields: dict) -> str:
    return fields.get(b"line", b"").decode(errors="replace")
