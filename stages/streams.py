"""Redis names, defined in one place for the control plane and the workers.

Durable routing goes through streams (at-least-once, acknowledged after processing);
liveness through keys with TTLs. Everything lives under one prefix so several
installations (or test runs) can share a Redis server.
"""

from __future__ import annotations

import os

PREFIX = os.environ.get("OMNISTAGE_REDIS_PREFIX", "omni")

ORCHESTRATOR_GROUP = "orchestrators"
REPLICA_GROUP = "replica"


def orchestrator_heartbeat(orchestrator_id: str) -> str:
    return f"{PREFIX}:hb:orchestrator:{orchestrator_id}"


def orchestrator_heartbeat_pattern() -> str:
    return f"{PREFIX}:hb:orchestrator:*"


def pool_heartbeat(pool: str, hostname: str) -> str:
    return f"{PREFIX}:hb:pool:{pool}:{hostname}"


def pool_heartbeat_pattern(pool: str = "*") -> str:
    return f"{PREFIX}:hb:pool:{pool}:*"


def replica_heartbeat(replica_id: str) -> str:
    return f"{PREFIX}:hb:replica:{replica_id}"


def deployment_replicas(deployment_id: str) -> str:
    """Hash: replica id -> stage name of the deployment's replica hosts that announced
    themselves (their heartbeats say whether they still live, and on which host)."""
    return f"{PREFIX}:replicas:{deployment_id}"


def replica_logs(replica_id: str) -> str:
    """A replica host's recent log lines (a capped stream; workers/log_stream.py writes it)."""
    return f"{PREFIX}:stream:logs:replica:{replica_id}"


def replica_input(replica_id: str) -> str:
    return f"{PREFIX}:stream:replica:{replica_id}"


def deployment_output(deployment_id: str) -> str:
    return f"{PREFIX}:stream:deployment:{deployment_id}"


def orchestrator_inbox() -> str:
    return f"{PREFIX}:stream:orchestrator"


def request_output(request_id: str) -> str:
    return f"{PREFIX}:stream:request:{request_id}"


def client_replies(client: str) -> str:
    """The client messages of every request one serving client submitted with `reply_to` (one reader)."""
    return f"{PREFIX}:stream:replies:{client}"


def request_state(request_id: str) -> str:
    return f"{PREFIX}:request:{request_id}"


def payload(key: str) -> str:
    return f"{PREFIX}:payload:{key}"


def aborted_requests() -> str:
    """Sorted set: wire ids of requests that ended (failed, cancelled, refused by a stage) -> when.
    Replica hosts drop their queued inputs and free their engine state at once, instead of
    working through them until the abort entry behind them in the stream is read."""
    return f"{PREFIX}:aborted"


def request_lock(request_id: str) -> str:
    return f"{PREFIX}:lock:request:{request_id}"


def active_requests(deployment_id: str) -> str:
    return f"{PREFIX}:active:{deployment_id}"


def reconciler_leader() -> str:
    return f"{PREFIX}:leader:reconciler"
