"""Scope checks for deployment routes, made by the accounts app's one permission module
(scopes, admin implication, deployment allow-lists); sessions need staff for writes.

Everyone with `deployments:read` sees every deployment (they are the catalogue of what can be
called); changing one (scale, stop, start, delete) is for the user who created it and for admins."""

from __future__ import annotations

from rest_framework import exceptions

from control_plane.accounts.models import ApiKey
from control_plane.accounts.permissions import is_admin, require_scope

CanReadDeployments = require_scope("deployments:read")


class CanWriteDeployments(require_scope("deployments:write")):
    def has_permission(self, request, view) -> bool:
        super().has_permission(request, view)
        if request.auth is None and not request.user.is_staff:
            raise exceptions.PermissionDenied("Managing deployments needs a staff account.")
        return True


def may_manage(user, api_key: ApiKey | None, deployment) -> bool:
    if is_admin(user, api_key):
        return True
    return deployment.created_by_id is not None and deployment.created_by_id == user.pk


def check_may_manage(request, deployment) -> None:
    api_key = request.auth if isinstance(request.auth, ApiKey) else None
    if not may_manage(request.user, api_key, deployment):
        raise exceptions.PermissionDenied(
            f"Only the user who created deployment '{deployment.name}' or an admin may change it."
        )
