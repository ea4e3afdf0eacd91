"""API key format, hashing and constant-time verification."""

from __future__ import annotations

import hashlib
import hmac
import secrets

KEY_PREFIX = "omni-"


def new_secret() -> tuple[str, str]:
    """Return (prefix, full key). The prefix is stored in clear to find the row."""
    prefix = secrets.token_hex(4)
    return prefix, f"{KEY_PREFIX}{prefix}-{secrets.token_urlsafe(32)}"


def hash_secret(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def prefix_of(key: str) -> str | None:
    if not key.startswith(KEY_PREFIX):
        return None
    prefix, _, rest = key.removeprefix(KEY_PREFIX).partition("-")
    return prefix if prefix and rest else None


def matches(key: str, hashed: str) -> bool:
    return hmac.compare_digest(hash_secret(key), hashed)
