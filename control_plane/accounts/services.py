"""API key services: create (the secret is returned once), revoke, authenticate."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.utils import timezone

from control_plane.accounts.keys import hash_secret, matches, new_secret, prefix_of
from control_plane.accounts.models import ApiKey

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
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)  # at most once a minute per key
        key.last_used_at = now
    return key


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
