"""Signed, expiring artifact URLs (`response_format: "url"`): the token is the credential.

/v1/files/<token>/content     token = signing.dumps(artifact id), salted, timestamped
"""

from __future__ import annotations

import time

from django.conf import settings
from django.core import signing

SALT = "omnistage.artifact-url"


def url_ttl_s() -> int:
    return int(getattr(settings, "ARTIFACT_URL_TTL_S", 3600))


def artifact_token(artifact_id) -> str:
    return signing.dumps(str(artifact_id), salt=SALT, compress=True)


def artifact_id_from_token(token: str, max_age_s: int | None = None) -> str | None:
    """The artifact id, or None when the token is forged or expired."""
    try:
        return signing.loads(token, salt=SALT, max_age=url_ttl_s() if max_age_s is None else max_age_s)
    except signing.BadSignature:  # SignatureExpired is a BadSignature
        return None


def signed_artifact_url(request, artifact) -> tuple[str, int]:
    """(absolute URL, expires_at unix time) of an artifact's content."""
    path = f"/v1/files/{artifact_token(artifact.id)}/content"
    return request.build_absolute_uri(path), int(time.time()) + url_ttl_s()
