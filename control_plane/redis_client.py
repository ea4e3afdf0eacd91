"""Redis clients for the control plane, built from settings.REDIS_URL."""

from __future__ import annotations

import redis
import redis.asyncio
from django.conf import settings


def get_redis(*, timeout: float = 2.0) -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=timeout, socket_connect_timeout=timeout)


def shared_redis(url: str, *, timeout: float = 2.0) -> redis.Redis:
    """A client that threads of one process share: at most REDIS_POOL_SIZE connections, and a
    command waits up to REDIS_POOL_TIMEOUT_S for a free one (redis-py's own pool raises instead,
    from 100 connections on since redis-py 8)."""
    pool = redis.BlockingConnectionPool.from_url(
        url,
        max_connections=settings.REDIS_POOL_SIZE,
        timeout=settings.REDIS_POOL_TIMEOUT_S,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        health_check_interval=30,
    )
    return redis.Redis(connection_pool=pool)


def shared_async_redis(url: str) -> redis.asyncio.Redis:
    """The asyncio twin of `shared_redis`, for the many requests of one event loop: at most
    REDIS_POOL_SIZE connections, and a command waits for a free one instead of failing."""
    pool = redis.asyncio.BlockingConnectionPool.from_url(
        url, max_connections=settings.REDIS_POOL_SIZE, timeout=settings.REDIS_POOL_TIMEOUT_S, socket_connect_timeout=5
    )
    return redis.asyncio.Redis(connection_pool=pool)


def get_async_redis(*, timeout: float | None = None) -> redis.asyncio.Redis:
    return redis.asyncio.Redis.from_url(settings.REDIS_URL, socket_timeout=timeout, socket_connect_timeout=5)
