"""Read side of request history (HackSoft's "selectors"; `selectors` would shadow the stdlib)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet

from control_plane.inference.models import Artifact, InferenceRequest


def request_list(
    *,
    viewer,
    see_all: bool,
    deployment: str | None = None,
    status: str | None = None,
    route: str | None = None,
    user: int | None = None,
    modality: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[InferenceRequest]:
    """Requests visible to `viewer` (their own; every user's when `see_all`), filtered."""
    rows = InferenceRequest.objects.select_related("user", "api_key").prefetch_related("artifacts")
    if not see_all:
        rows = rows.filter(user=viewer)
    elif user is not None:
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


def request_get(*, viewer, see_all: bool, request_id: str) -> InferenceRequest | None:
    """By the API's request id or the row's UUID."""
    rows = request_list(viewer=viewer, see_all=see_all)
    row = rows.filter(request_id=request_id).first()
    if row is None and _is_uuid(request_id):
        row = rows.filter(pk=request_id).first()
    return row


def artifact_get(*, viewer, see_all: bool, artifact_id: str) -> Artifact | None:
    if not _is_uuid(artifact_id):
        return None
    artifacts = Artifact.objects.select_related("request")
    if not see_all:
        artifacts = artifacts.filter(request__user=viewer)
    return artifacts.filter(pk=artifact_id).first()


def _is_uuid(value: str) -> bool:
    import uuid

    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True
