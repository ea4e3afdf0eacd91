"""Short-lived client secrets for browsers: minted with an API key, scoped to one deployment.

    secret = client_secret_mint(user, api_key, deployment="voice", session={...}, ttl_s=600)
    grant = await client_secret_resolve(secret.value)     # None when unknown or expired

Only the secret's SHA-256 is stored, in Redis with the secret's lifetime as TTL; a grant
carries who minted it and the session configuration it starts with. A secret opens any
number of sessions until it expires; revoking the API key that minted it revokes it too.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import redis.asyncio

from stages import streams

PREFIX = "ek_"
MIN_TTL_S, MAX_TTL_S, DEFAULT_TTL_S = 10, 7200, 600


@dataclass(frozen=True)
class Grant:
    user_id: int
    api_key_id: int | None
    deployment: str
    expires_at: int
    session: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ClientSecret:
    value: str
    grant: Grant


def redis_key(value: str) -> str:
    return f"{streams.PREFIX}:realtime:client_secret:{hashlib.sha256(value.encode()).hexdigest()}"


async def client_secret_mint(
    client: redis.asyncio.Redis,
    *,
    user_id: int,
    api_key_id: int | None,
    deployment: str,
    session: dict,
    ttl_s: int,
    clock: Callable[[], float] = time.time,
) -> ClientSecret:
    """`clock` dates the grant; the Redis TTL always counts from now (a web node whose clock
    runs behind Redis's mints grants that expire before their key does)."""
    value = PREFIX + secrets.token_urlsafe(32)
    grant = Grant(user_id, api_key_id, deployment, int(clock()) + ttl_s, session)
    await client.set(redis_key(value), json.dumps(asdict(grant)), ex=ttl_s)
    return ClientSecret(value, grant)


async def client_secret_resolve(client: redis.asyncio.Redis, value: str) -> Grant | None:
    if not value.startswith(PREFIX):
        return None
    raw = await client.get(redis_key(value))
    if raw is None:
        return None
    grant = Grant(**json.loads(raw))
    return grant if grant.expires_at > time.time() else None


def is_client_secret(value: str) -> bool:
    return value.startswith(PREFIX)
