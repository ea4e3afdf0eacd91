"""Redis key names of the accounts app (quota counters, admissions, login throttle).

They live under `stages.streams.PREFIX` like every other Omnistage key. Tests isolate
themselves by setting `ACCOUNTS_REDIS_PREFIX` (read at call time, not import time).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import redis
from django.conf import settings

from control_plane.redis_client import shared_redis
from stages import streams


def prefix() -> str:
    return getattr(settings, "ACCOUNTS_REDIS_PREFIX", None) or f"{streams.PREFIX}:accounts"


def quota_counter(subject: str, metric: str, window: str) -> str:
    """Base name of a windowed counter; the Lua script appends the window index."""
    return f"{prefix()}:quota:{subject}:{metric}:{window}"


def quota_slots(subject: str) -> str:
    """Sorted set of admission ids holding a concurrency slot, scored by lease expiry."""
    return f"{prefix()}:quota:{subject}:slots"


def admission(admission_id: str) -> str:
    return f"{prefix()}:admission:{admission_id}"


def login_failures(username: str, ip: str) -> str:
    digest = hashlib.sha256(f"{username.lower()}\0{ip}".encode()).hexdigest()[:32]
    return f"{prefix()}:login:fail:{digest}"


def login_failures_from_ip(ip: str) -> str:
    return f"{prefix()}:login:ip:{ip}"


@lru_cache(maxsize=8)
def _client_for(url: str) -> redis.Redis:
    return shared_redis(url)


def client() -> redis.Redis:
    """One pooled client per REDIS_URL (control_plane.redis_client.get_redis builds a new pool per call)."""
    return _client_for(settings.REDIS_URL)
