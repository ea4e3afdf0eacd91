"""Celery tasks of the worker pools. Lifecycle tasks for replicas are added by the runtime."""

from __future__ import annotations

from celery import shared_task

from workers import pool_heartbeat  # noqa: F401 - connects the worker's heartbeat signals


@shared_task(name="workers.ping")
def ping() -> str:
    return "pong"
