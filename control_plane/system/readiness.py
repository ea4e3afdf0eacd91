"""Readiness of the platform's components: database, Redis, orchestrator, worker pools."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from django.db import connection

from control_plane.redis_client import get_redis
from stages import streams


@dataclass(frozen=True)
class ComponentStatus:
    ok: bool
    detail: str


DATABASE_CHECK_TIMEOUT_S = 3.0
"""A pooled connection is waited for this long, not the pool's own timeout (sized for load)."""


def check_database() -> ComponentStatus:
    try:
        pool = getattr(connection, "pool", None)  # PostgreSQL with a connection pool
        if pool is not None:
            pool.open()  # Django opens it on first use; a no-op once open
            with pool.connection(timeout=DATABASE_CHECK_TIMEOUT_S) as pooled:
                pooled.execute("SELECT 1")
        else:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
        return ComponentStatus(True, connection.vendor)
    except Exception as error:  # any driver or pool error means "not ready"
        return ComponentStatus(False, f"database unreachable: {error}")


def live_heartbeats(pattern: str) -> list[dict]:
    client = get_redis()
    beats = []
    for key in client.scan_iter(match=pattern, count=200):
        raw = client.get(key)
        if raw:
            try:
                beats.append(json.loads(raw))
            except ValueError:
                beats.append({"key": key.decode()})
    return beats


def platform_status() -> dict[str, ComponentStatus]:
    status = {"database": check_database()}
    try:
        get_redis().ping()
    except Exception as error:
        status["redis"] = ComponentStatus(False, f"redis unreachable: {error}")
        status["orchestrator"] = ComponentStatus(False, "unknown: redis unreachable")
        status["workers"] = ComponentStatus(False, "unknown: redis unreachable")
        return status
    status["redis"] = ComponentStatus(True, "ping ok")
    orchestrators = live_heartbeats(streams.orchestrator_heartbeat_pattern())
    status["orchestrator"] = (
        ComponentStatus(True, f"{len(orchestrators)} live")
        if orchestrators
        else ComponentStatus(False, "no orchestrator heartbeat")
    )
    workers = live_heartbeats(streams.pool_heartbeat_pattern())
    pools = sorted({beat.get("pool", "?") for beat in workers})
    status["workers"] = (
        ComponentStatus(True, f"{len(workers)} live in pools {', '.join(pools)}")
        if workers
        else ComponentStatus(False, "no worker pool heartbeat")
    )
    return status


def as_json(status: dict[str, ComponentStatus]) -> dict:
    return {name: asdict(component) for name, component in status.items()}
