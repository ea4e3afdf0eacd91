"""Read side of request history (HackSoft's "selectors"; `selectors` would shadow the stdlib).

Every read starts by writing what is still pending of the rows it may show (the viewer's,
everyone's for an admin: history_log.history_catch_up_for), so a request that has just ended
reads in its final state, with its artifacts, even while the history writer lags or is down.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from django.db.models import QuerySet

from control_plane.inference.history_log import history_catch_up_for
from control_plane.inference.models import Artifact, InferenceRequest


def visible_requests(
    *, viewer, see_all: bool, deployments: Collection[str] | None = None
) -> QuerySet[InferenceRequest]:
    """The history `viewer` may read: their own requests (every user's when `see_all`), and
    only those of `deployments` when given (an API key's allow-list)."""
    history_catch_up_for(user_id=getattr(viewer, "pk", None), everyone=see_all)
    rows = InferenceRequest.objects.all()
    if not see_all:
        rows = rows.filter(user=viewer)
    if deployments is not None:
        rows = rows.filter(deployment_name__in=list(deployments))
    return rows


def request_list(
    *,
    viewer,
    see_all: bool,
    deployments: Collection[str] | None = None,
    deployment: str | None = None,
    status: str | None = None,
    route: str | None = None,
    user: int | None = None,
    modality: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[InferenceRequest]:
    """Requests visible to `viewer` (see `visible_requests`), filtered."""
    rows = visible_requests(viewer=viewer, see_all=see_all, deployments=deployments)
    rows = rows.select_related("user", "api_key").prefetch_related("artifacts")
    if see_all and user is not None:
        rows = rows.filter(user_id=user)
    if deployment:
        rows = rows.filter(deployment_name=deployment)
    if status:
        rows = rows.filter(status=status)
    if route:
        rows = rows.filter(route=route)
    if modality:
        rows = rows.filter(modalities__contains=f",{modality},")
    if since:
        rows = rows.filter(created_at__gte=since)
    if until:
        rows = rows.filter(created_at__lt=until)
    return rows


def request_get(
    *, viewer, see_all: bool, request_id: str, deployments: Collection[str] | None = None
) -> InferenceRequest | None:
    """By the API's request id or the row's UUID."""
    rows = request_list(viewer=viewer, see_all=see_all, deployments=deployments)
    row = rows.filter(request_id=request_id).first()
    if row is None and _is_uuid(request_id):
        row = rows.filter(pk=request_id).first()
    return row


def artifact_get(
    *, viewer, see_all: bool, artifact_id: str, deployments: Collection[str] | None = None
) -> Artifact | None:
    if not _is_uuid(artifact_id):
        return None
    requests = visible_requests(viewer=viewer, see_all=see_all, deployments=deployments)
    return Artifact.objects.select_related("request").filter(pk=artifact_id, request__in=requests).first()


def _is_uuid(value: str) -> bool:
    import uuid

    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True
