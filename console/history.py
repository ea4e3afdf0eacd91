"""The console's view of the request history (control_plane.inference): reading rows with the
visibility rule of the console (playground runs are recorded by their request runs).

Visibility: a user sees their own requests; admins see everyone's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import date, datetime, time, timedelta

from django.db.models import Q, QuerySet
from django.utils import timezone

from console.access import user_is_admin
from control_plane.inference.models import InferenceRequest, Route, Status
from control_plane.inference.queries import request_get, request_list


@dataclass(frozen=True)
class HistoryFilters:
    """The history's filters as the query string carries them (so a filtered page can be linked,
    reloaded and paged through)."""

    text: str = ""
    status: str = ""
    route: str = ""
    deployment: str = ""
    username: str = ""
    since: date | None = None
    until: date | None = None
    """Inclusive: the rows of that whole day."""

    PARAMS = {"text": "q", "status": "status", "route": "route", "deployment": "deployment", "username": "user",
              "since": "from", "until": "to"}  # fmt: skip

    @classmethod
    def from_params(cls, params) -> HistoryFilters:
        values = {field: params.get(name, "").strip() for field, name in cls.PARAMS.items()}
        values["status"] = values["status"] if values["status"] in Status.values else ""
        values["route"] = values["route"] if values["route"] in Route.values else ""
        values["since"], values["until"] = _day(values["since"]), _day(values["until"])
        return cls(**values)

    def query_string(self) -> dict[str, str]:
        """The non-empty filters as query parameters (for the pagination links)."""
        return {self.PARAMS[field]: str(value) for field, value in asdict(self).items() if value}


def _day(text: str) -> date | None:
    try:
        return date.fromisoformat(text) if text else None
    except ValueError:
        return None


def _start_of(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


def history_search(user, filters: HistoryFilters) -> QuerySet[InferenceRequest]:
    rows = request_list(
        viewer=user,
        see_all=user_is_admin(user),
        status=filters.status or None,
        route=filters.route or None,
        deployment=filters.deployment or None,
        since=_start_of(filters.since) if filters.since else None,
        until=_start_of(filters.until + timedelta(days=1)) if filters.until else None,
    ).order_by("-created_at", "-pk")
    text, username = filters.text, filters.username
    if text:
        rows = rows.filter(Q(request_id__icontains=text) | Q(output_text__icontains=text) | Q(inputs__icontains=text))
    if username and user_is_admin(user):
        rows = rows.filter(user__username=username)
    return rows


def input_text(row: InferenceRequest) -> str:
    """The text a request was asked with: its prompt, speech input or last user message."""
    inputs = row.inputs or {}
    for key in ("prompt", "input"):
        if isinstance(inputs.get(key), str):
            return inputs[key]
    messages = inputs.get("messages") or []
    content = messages[-1].get("content", "") if messages and isinstance(messages[-1], dict) else ""
    return content if isinstance(content, str) else ""


def api_video_jobs(user, limit: int = 10) -> list[InferenceRequest]:
    """The user's own newest video jobs made through `/v1/videos` (the console's own runs are on
    the video page already), each with its video artifact if it has one."""
    rows = request_list(viewer=user, see_all=False, route=Route.VIDEOS).filter(deleted_at__isnull=True)
    jobs = list(rows.exclude(request_id__startswith=CONSOLE_PREFIX).order_by("-created_at")[:limit])
    for job in jobs:
        job.video = next((artifact for artifact in job.artifacts.all() if artifact.kind == "video"), None)
    return jobs


CONSOLE_PREFIX = "console-"
"""The request ids of the playgrounds' runs (console.playground_requests.new_request_id)."""


def history_get(user, request_id: str) -> InferenceRequest | None:
    return request_get(viewer=user, see_all=user_is_admin(user), request_id=request_id)


STATUSES = Status.choices
ROUTE_CHOICES = Route.choices
