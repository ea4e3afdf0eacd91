"""Scope checks for deployment routes, made by the accounts app's one permission module
(scopes, admin implication, deployment allow-lists); sessions need staff for writes."""

from __future__ import annotations

from rest_framework import exceptions

from control_plane.accounts.permissions import require_scope

CanReadDeployments = require_scope("deployments:read")


class CanWriteDeployments(require_scope("deployments:write")):
    def has_permission(self, request, view) -> bool:
        super().has_permission(request, view)
        if request.auth is None and not request.user.is_staff:
            raise exceptions.PermissionDenied("Managing deployments needs a staff account.")
        return True
