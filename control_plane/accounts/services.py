"""API key services: create (the secret is returned once), revoke, authenticate (control_plane/accounts/key_cache.py)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.utils import timezone

from control_plane.accounts.key_cache import key_cache, key_changed
from control_plane.accounts.keys import hash_secret, matches, new_secret, prefix_of
from control_plane.accounts.models import ApiKey
from control_plane.orm_threads import in_background, orm_in_thread

DEFAULT_SCOPES = [ApiKey.Scope.INFERENCE, ApiKey.Scope.DEPLOYMENTS_READ, ApiKey.Scope.DEPLOYMENTS_WRITE]
LAST_USED_RESOLUTION = timedelta(seconds=60)


def api_key_create(
    *,
    user,
    name: str,
    scopes: Iterable[str] | None = None,
    expires_at: datetime | None = None,
    allowed_deployments: Iterable[str] | None = None,
    created_with: ApiKey | None = None,
) -> tuple[ApiKey, str]:
    """Create a key and return it with its secret, which is never stored nor shown again.

    `created_with`: the key that authenticated the creation, if any; the new key may not
    hold more scopes or more deployments than it (no escalation through key creation).
    """
    scopes = list(dict.fromkeys(scopes if scopes is not None else DEFAULT_SCOPES))
    deployments = list(dict.fromkeys(allowed_deployments or []))
    api_key_validate(user=user, name=name, scopes=scopes, expires_at=expires_at, allowed_deployments=deployments)
    if created_with is not None:
        _validate_no_escalation(created_with, scopes, deployments)
    prefix, secret = new_secret()
    key = ApiKey.objects.create(
        user=user,
        name=name,
        prefix=prefix,
        hashed_secret=hash_secret(secret),
        scopes=scopes,
        allowed_deployments=deployments,
        expires_at=expires_at,
    )
    return key, secret


def api_key_revoke(*, key: ApiKey) -> ApiKey:
    ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    key_changed(key.prefix)
    key.refresh_from_db()
    return key


def api_key_authenticate(secret: str) -> ApiKey | None:
    """The active key for `secret`, or None. Compares hashes in constant time; the key comes
    from the process's key cache (no query) when it is there."""
    prefix = prefix_of(secret)
    if prefix is None:
        return None
    key = key_cache.get(prefix) or key_cache.load(prefix, _load_key)
    key = key if key is not None and _usable(key, secret) else None
    if key is not None and _last_used_is_stale(key):
        _touch_last_used(key)
    return key


async def aapi_key_authenticate(secret: str) -> ApiKey | None:
    """`api_key_authenticate` for async views: a cached key is answered in the event loop, a
    miss reads the database from a pooled thread, and `last_used_at` is written in the background."""
    prefix = prefix_of(secret)
    if prefix is None:
        return None
    key = key_cache.get(prefix) or await orm_in_thread(key_cache.load)(prefix, _load_key)
    key = key if key is not None and _usable(key, secret) else None
    if key is not None and _last_used_is_stale(key):
        key.last_used_at = timezone.now()  # one write per key and resolution, not one per request
        in_background(orm_in_thread(_touch_last_used)(key))
    return key


def _load_key(prefix: str) -> ApiKey | None:
    return ApiKey.objects.select_related("user").filter(prefix=prefix).first()


def _usable(key: ApiKey, secret: str) -> bool:
    return matches(secret, key.hashed_secret) and key.is_active and key.user.is_active


def _last_used_is_stale(key: ApiKey) -> bool:
    return key.last_used_at is None or timezone.now() - key.last_used_at > LAST_USED_RESOLUTION


def _touch_last_used(key: ApiKey) -> None:
    now = timezone.now()
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)  # at most once a minute per key
    key.last_used_at = now


def api_key_validate(
    *, user, name: str, scopes: list[str], expires_at, allowed_deployments: list[str], new: bool = True
) -> None:
    """Raise ValidationError (by field) for a key that may not exist. `new`: the expiry must be ahead."""
    errors = {}
    if not name or not name.strip():
        errors["name"] = "A key needs a name."
    unknown = [scope for scope in scopes if scope not in ApiKey.Scope.values]
    if unknown:
        errors["scopes"] = f"Unknown scopes {unknown}; expected some of {ApiKey.Scope.values}."
    elif not scopes:
        errors["scopes"] = "A key needs at least one scope."
    elif ApiKey.Scope.ADMIN in scopes and not user.is_staff:
        errors["scopes"] = "Only staff users may hold the 'admin' scope."
    if new and expires_at is not None and expires_at <= timezone.now():
        errors["expires_at"] = "The expiry must be in the future."
    if any(not isinstance(deployment, str) or not deployment.strip() for deployment in allowed_deployments):
        errors["allowed_deployments"] = "Deployment names must be non-empty strings."
    if errors:
        raise ValidationError(errors)


def _validate_no_escalation(creator: ApiKey, scopes: list[str], deployments: list[str]) -> None:
    held = set(creator.scopes)
    if ApiKey.Scope.ADMIN not in held and not set(scopes) <= held:
        raise ValidationError({"scopes": "A key cannot create a key with scopes it does not hold itself."})
    if creator.allowed_deployments and (not deployments or not set(deployments) <= set(creator.allowed_deployments)):
        raise ValidationError(
            {"allowed_deployments": "A key restricted to some deployments can only create keys restricted to them."}
        )
