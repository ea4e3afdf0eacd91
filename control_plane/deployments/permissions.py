"""Scope checks for deployment routes: API keys need the scope; session users are trusted
with what their account may do (staff for writes)."""

from __future__ import annotations

from rest_framework.permissions import BasePermission


class _ScopePermission(BasePermission):
    scope = ""
    message = "This API key lacks the required scope."

    def has_permission(self, request, view) -> bool:
        user = request.user
        if not user or not user.is_authenticated:
            return False
        key = request.auth
        if key is not None and hasattr(key, "scopes"):
            return self.scope in key.scopes or "admin" in key.scopes
        return self.allows_session_user(user)

    def allows_session_user(self, user) -> bool:
        return True


class CanReadDeployments(_ScopePermission):
    scope = "deployments:read"


class CanWriteDeployments(_ScopePermission):
    scope = "deployments:write"

    def allows_session_user(self, user) -> bool:
        return user.is_staff
