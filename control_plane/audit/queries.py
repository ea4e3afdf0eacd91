"""Reading the audit log (HackSoft's "selectors")."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q, QuerySet

from control_plane.audit.models import AuditEntry


def audit_entry_list(
    *,
    actor: str | None = None,
    action: str | None = None,
    target: str | None = None,
    target_kind: str | None = None,
    channel: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[AuditEntry]:
    """Newest first. `actor`: a username (exact) or a user id; `action`: exact, or a prefix ending
    in '.' ("deployment." for every deployment action); `target`: the target's name, exact;
    `until` is exclusive."""
    entries = AuditEntry.objects.all()
    if actor:
        by_id = Q(actor_id=int(actor)) if actor.isdigit() else Q()
        entries = entries.filter(Q(actor_name=actor) | by_id)
    if action:
        entries = entries.filter(action__startswith=action) if action.endswith(".") else entries.filter(action=action)
    if target:
        entries = entries.filter(target_name=target)
    if target_kind:
        entries = entries.filter(target_kind=target_kind)
    if channel:
        entries = entries.filter(channel=channel)
    if since:
        entries = entries.filter(created_at__gte=since)
    if until:
        entries = entries.filter(created_at__lt=until)
    return entries
