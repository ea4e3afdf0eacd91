"""Writing the audit log. Callers record inside the transaction of the change they record, so a
change that rolls back leaves no entry."""

from __future__ import annotations

import json

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models, transaction

from control_plane.accounts.models import ApiKey
from control_plane.audit.models import AuditEntry
from control_plane.audit.origin import channel_of, client_ip
from control_plane.audit.target_details import target_details

TARGET_KINDS = {"apikey": "api_key"}  # model name -> target kind, where they differ


class AuditOutsideTransaction(RuntimeError):
    """An entry written outside the change's transaction could outlive a change that rolled back."""


def audit_record(request, action: str, target: models.Model, details: dict | None = None) -> AuditEntry:
    """Record that the request's user did `action` to `target`. Must run inside the change's transaction.

    `details` adds to (or overrides) what target_details.py says about the target."""
    if not transaction.get_connection().in_atomic_block:
        raise AuditOutsideTransaction(f"{action}: record the audit entry inside the change's transaction")
    user = getattr(request, "user", None)
    actor = user if user is not None and user.is_authenticated else None
    api_key = getattr(request, "auth", None)
    return AuditEntry.objects.create(
        actor=actor,
        actor_name=actor.get_username() if actor is not None else "",
        api_key_prefix=api_key.prefix if isinstance(api_key, ApiKey) else "",
        action=action,
        target_kind=target_kind_of(target),
        target_id="" if target.pk is None else str(target.pk),
        target_name=str(target)[:200],
        details=_plain_json({**target_details(target), **(details or {})}),
        client_ip=client_ip(request),
        channel=channel_of(request),
    )


def target_kind_of(target: models.Model) -> str:
    name = target._meta.model_name
    return TARGET_KINDS.get(name, name)


def _plain_json(details: dict) -> dict:
    """Dates, decimals and UUIDs as the strings the REST API shows."""
    return json.loads(json.dumps(details, cls=DjangoJSONEncoder, default=str))
