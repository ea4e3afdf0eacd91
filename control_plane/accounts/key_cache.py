"""API keys answered from memory: the key check makes no database query on the hot path.

Each process keeps the keys it has looked up (by prefix, with their user). A request's
secret is checked against the cached hash, the key's revocation and expiry and its user's
`is_active` at every use (expiry against the clock, so a key expires on time with no message).
Whatever changes a key or its user publishes an invalidation (`control_plane.invalidation`,
topics "key" and "user") and every process drops the entries at once: a revoked key, a
deactivated user or a changed scope or allow-list holds on every web node within the
pub/sub latency. The cache answers only while the invalidation channel is subscribed, and
entries also expire after ACCOUNTS_KEY_CACHE_TTL_S (default 300 s), which bounds a change made
behind the services' back (a queryset `update()` of users, for example).

The cached ApiKey and User instances are shared by concurrent requests: read only.
"""

from __future__ import annotations

from django.conf import settings

from control_plane import invalidation

KEY, USER = "key", "user"


def ttl_s() -> float:
    return float(getattr(settings, "ACCOUNTS_KEY_CACHE_TTL_S", 300.0))


key_cache = invalidation.InvalidatedCache(KEY, ttl_s)


def _drop_user(user_id: str) -> None:
    if user_id == invalidation.EVERYTHING:
        key_cache.drop(user_id)
    else:
        key_cache.drop_where(lambda key: str(key.user_id) == user_id)


invalidation.register(USER, _drop_user)


def key_changed(prefix: str) -> None:
    invalidation.publish(KEY, prefix)


def user_changed(user_id) -> None:
    invalidation.publish(USER, str(user_id))


def on_key_saved(sender, instance, **kwargs) -> None:
    key_changed(instance.prefix)


def on_user_saved(sender, instance, **kwargs) -> None:
    user_changed(instance.pk)
