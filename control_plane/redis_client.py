"""Redis clients for the control plane, built from settings.REDIS_URL."""

from __future__ import annotations

import redis
import redis.asyncio
from django.conf import settings


def get_redis(*, timeout: float = 2.0) -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=timeout, socket_connect_timeout=timeout)


def get_async_redis(*, timeout: float | None = None) -> redis.asyncio.Redis:
    return redis.asyncio.Redis.from_url(settings.REDIS_URL, socket_timeout=timeout, socket_connect_timeout=5)
