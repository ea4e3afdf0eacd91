"""The audit log page, for admins: who changed which deployment, key or quota, when, from where."""

from __future__ import annotations

import json
from datetime import UTC, datetime, time, timedelta

from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.utils.dateparse import parse_date

from console.access import signed_in, user_is_admin
from console.pages import render_page
from control_plane.audit.models import Action, Channel
from control_plane.audit.queries import audit_entry_list

PAGE_SIZE = 50
TARGET_KINDS = ["deployment", "api_key", "quota"]


@signed_in
def audit(request):
    if not user_is_admin(request.user):
        raise PermissionDenied("The audit log is for admins.")
    filters = {
        name: request.GET.get(name, "").strip()
        for name in ("actor", "action", "target", "kind", "channel", "since", "until")
    }
    entries = audit_entry_list(
        actor=filters["actor"] or None,
        action=filters["action"] or None,
        target=filters["target"] or None,
        target_kind=filters["kind"] or None,
        channel=filters["channel"] or None,
        since=_day_start(filters["since"]),
        until=_day_start(filters["until"], days_after=1),
    )
    page = Paginator(entries, PAGE_SIZE).get_page(request.GET.get("page"))
    for entry in page:
        entry.details_text = json.dumps(entry.details, sort_keys=True)
    context = {
        "page": page,
        "filters": filters,
        "actions": Action.values,
        "kinds": TARGET_KINDS,
        "channels": Channel.values,
        "query": _query_without_page(request),
    }
    return render_page(request, "console/audit.html", context, active="audit")


def _day_start(value: str, *, days_after: int = 0) -> datetime | None:
    """A YYYY-MM-DD date as UTC midnight (the next one for an inclusive end); None when empty or bad."""
    try:
        day = parse_date(value) if value else None
    except ValueError:
        day = None
    return datetime.combine(day + timedelta(days=days_after), time.min, tzinfo=UTC) if day else None


def _query_without_page(request) -> str:
    query = request.GET.copy()
    query.pop("page", None)
    return query.urlencode()
