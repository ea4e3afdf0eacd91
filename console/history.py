"""The console's view of the request history (control_plane.inference): reading rows with the
visibility rule of the console (playground runs are recorded by their request runs).

Visibility: a user sees their own requests; admins see everyone's.
"""

from __future__ import annotations

from django.db.models import Q, QuerySet

from console.access import user_is_admin
from control_plane.inference.models import InferenceRequest, Route, Status
from control_plane.inference.queries import request_get, request_list


def history_search(
    user, *, text: str = "", status: str = "", route: str = "", deployment: str = "", username: str = ""
) -> QuerySet[InferenceRequest]:
    rows = request_list(viewer=user, see_all=user_is_admin(user), status=status or None, route=route or None,
                        deployment=deployment or None)  # fmt: skip
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


def history_get(user, request_id: str) -> InferenceRequest | None:
    return request_get(viewer=user, see_all=user_is_admin(user), request_id=request_id)


STATUSES = Status.choices
ROUTE_CHOICES = Route.choices
