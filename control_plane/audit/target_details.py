"""What an entry says about its target by default: the few fields an operator asks about."""

from __future__ import annotations

from django.db import models


def target_details(target: models.Model) -> dict:
    describe = _DESCRIBERS.get(target._meta.label_lower)
    return describe(target) if describe is not None else {}


def _deployment(deployment) -> dict:
    return {"pipeline": deployment.pipeline.name, "desired_state": deployment.desired_state}


def _api_key(key) -> dict:
    return {
        "owner": key.user.get_username(),
        "prefix": key.prefix,
        "scopes": list(key.scopes),
        "allowed_deployments": list(key.allowed_deployments),
        "expires_at": key.expires_at,
        "revoked_at": key.revoked_at,
    }


def _quota(quota) -> dict:
    return {
        "subject": quota.subject_label,
        "metric": quota.metric,
        "window": quota.window,
        "limit": quota.limit,
        "is_active": quota.is_active,
    }


_DESCRIBERS = {"deployments.deployment": _deployment, "accounts.apikey": _api_key, "accounts.quota": _quota}
AUDITED_MODELS = frozenset(_DESCRIBERS)
