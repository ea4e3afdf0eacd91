from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from control_plane.accounts.keys import hash_secret, matches, new_secret, prefix_of
from control_plane.accounts.models import ApiKey

DEFAULT_SCOPES = [ApiKey.Scope.INFERENCE, ApiKey.Scope.DEPLOYMENTS_READ, ApiKey.Scope.DEPLOYMENTS_WRITE]


def api_key_create(
    *, user, name: str, scopes: list[str] | None = None, expires_at: datetime | None = None
) -> tuple[ApiKey, str]:
    """Create a key and return it with its secret, which is never stored nor shown again."""
    prefix, secret = new_secret()
    key = ApiKey.objects.create(
        user=user,
        name=name,
        prefix=prefix,
        hashed_secret=hash_secret(secret),
        scopes=list(scopes if scopes is not None else DEFAULT_SCOPES),
        expires_at=expires_at,
    )
    return key, secret


def api_key_revoke(*, key: ApiKey) -> ApiKey:
    ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    key.refresh_from_db()
    return key


def api_key_authenticate(secret: str) -> ApiKey | None:
    """The active key for `secret`, or None. Compares hashes in constant time."""
    prefix = prefix_of(secret)
    if prefix is None:
        return None
    key = ApiKey.objects.select_related("user").filter(prefix=prefix).first()
    if key is None or not matches(secret, key.hashed_secret) or not key.is_active or not key.user.is_active:
        return None
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
    return key
