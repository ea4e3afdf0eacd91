"""GET /v1/files/{token}/content: an artifact by signed, expiring URL (no key needed: the
token is the credential, see control_plane/inference/signing.py)."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.http import FileResponse

from control_plane.inference.errors import ApiError, openai_endpoint
from control_plane.inference.history_log import history_catch_up_for
from control_plane.inference.models import Artifact
from control_plane.inference.signing import artifact_id_from_token


def _open(artifact_id: str):
    artifact = Artifact.objects.filter(pk=artifact_id).first()
    if artifact is None:  # a URL given out a moment ago: its row may still be on its way
        history_catch_up_for(everyone=True)
        artifact = Artifact.objects.filter(pk=artifact_id).first()
    if artifact is None:
        return None, None
    try:
        return artifact, artifact.file.open("rb")
    except (FileNotFoundError, OSError):
        return artifact, None


@openai_endpoint("GET")
async def signed_file(request, token: str):
    artifact_id = artifact_id_from_token(token)
    if artifact_id is None:
        raise ApiError(403, "This file URL is invalid or has expired.", code="invalid_signature")
    artifact, handle = await sync_to_async(_open)(artifact_id)
    if handle is None:
        raise ApiError(404, "The file no longer exists.", code="file_not_found")
    filename = artifact.file.name.rsplit("/", 1)[-1]
    return FileResponse(handle, content_type=artifact.mime_type, filename=filename)
