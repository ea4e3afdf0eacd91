"""The platform's supervised processes besides Redis and the web tier: the worker pool, the
orchestrator and the history writer, as `Component`s. `manage.py omni_up` starts these; the live
tests start the very same command lines (tests/live_stack.py), so what they test is what runs."""

from __future__ import annotations

import sys

import redis

from control_plane.inference.redis_names import history_writer_heartbeat_pattern
from control_plane.system.supervisor import Component
from stages import streams


def worker_component(
    pools: str, concurrency: int, env: dict[str, str], *, node: str | None = None, log_level: str = "INFO"
) -> Component:
    """A Celery worker pool on `pools` (a comma list); ready once a pool publishes its heartbeat."""
    argv = [
        sys.executable, "-m", "celery", "-A", "control_plane", "worker",
        "-Q", pools, "-c", str(concurrency), "-n", node or f"{pools.split(',')[0]}@%h", "-l", log_level,
    ]  # fmt: skip
    ready = heartbeat_seen(env, streams.pool_heartbeat_pattern())
    return Component("worker", argv, ready=ready, ready_timeout_s=120, env=env, restart=True)


def orchestrator_component(env: dict[str, str]) -> Component:
    argv = [sys.executable, "manage.py", "orchestrator"]
    ready = heartbeat_seen(env, streams.orchestrator_heartbeat_pattern())
    return Component("orchestrator", argv, ready=ready, env=env, restart=True)


def history_writer_component(env: dict[str, str]) -> Component:
    argv = [sys.executable, "manage.py", "history_writer"]
    ready = heartbeat_seen(env, history_writer_heartbeat_pattern())
    return Component("history", argv, ready=ready, env=env, restart=True)


def heartbeat_seen(env: dict[str, str], pattern: str):
    """A readiness check: some key matching `pattern` is in the Redis at env's REDIS_URL."""

    def ready() -> bool:
        client = redis.Redis.from_url(env["REDIS_URL"], socket_timeout=1)
        try:
            return next(client.scan_iter(match=pattern, count=100), None) is not None
        finally:
            client.close()

    return ready
