"""The one place that decides who may do what: DRF views, plain Django views and async
/v1 views all end in `check_access`.

- A request is made by a user, either with an API key (`Authorization: Bearer omni-…`) or
  with a console session. A key carries its own scopes; a session carries every scope but
  `admin`, and `admin` too when the user is staff. `admin` implies every other scope, and a
  key's `admin` scope counts only while its user is staff.
- A key with an allow-list may only touch the deployments named in it.

DRF views declare what they need with `permission_classes = [require_scope("inference")]`;
the route matrix test (tests/control_plane/accounts/test_accounts_matrix.py) reads that
declaration and fails for any /api view without one.
"""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.permissions import BasePermission

from control_plane.accounts.models import ApiKey

Scope = ApiKey.Scope
ALL_SCOPES = frozenset(Scope.values)
SESSION_SCOPES = ALL_SCOPES - {Scope.ADMIN}


class AccessDenied(Exception):
    """401 (no valid credentials) or 403 (valid, but not allowed). `code` follows OpenAI's errors."""

    def __init__(self, status: int, message: str, code: str):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code

    @classmethod
    def unauthenticated(cls, message: str = "Authentication required: send 'Authorization: Bearer <API key>'."):
        return cls(401, message, "invalid_api_key")

    @classmethod
    def forbidden(cls, message: str):
        return cls(403, message, "insufficient_permissions")


def principal_scopes(user, api_key: ApiKey | None) -> frozenset[str]:
    granted = frozenset(api_key.scopes) if api_key is not None else SESSION_SCOPES | _staff_admin(user)
    if Scope.ADMIN in granted and not user.is_staff:
        granted = granted - {Scope.ADMIN}
    return ALL_SCOPES if Scope.ADMIN in granted else granted


def deployment_allow_list(api_key: ApiKey | None) -> list[str] | None:
    """The deployments a key is limited to; None when it may use every one (sessions too)."""
    if api_key is None or not api_key.allowed_deployments:
        return None
    return list(api_key.allowed_deployments)


def deployment_allowed(api_key: ApiKey | None, deployment) -> bool:
    """`deployment` is a name or an object with `.name`. Sessions are not restricted."""
    if api_key is None or not api_key.allowed_deployments:
        return True
    name = deployment if isinstance(deployment, str) else getattr(deployment, "name", None)
    return name in api_key.allowed_deployments


def check_access(user, api_key: ApiKey | None, scope: str, deployment=None) -> None:
    """Raise AccessDenied unless `user` (with `api_key`, or by session when None) holds `scope`
    and, when `deployment` is given, the key may use that deployment."""
    if scope not in ALL_SCOPES:
        raise ValueError(f"unknown scope {scope!r}")
    if user is None or not user.is_authenticated or not user.is_active:
        raise AccessDenied.unauthenticated()
    if api_key is not None:
        if api_key.user_id != user.pk or not api_key.is_active:
            raise AccessDenied.unauthenticated("Invalid, expired or revoked API key.")
    if scope not in principal_scopes(user, api_key):
        raise AccessDenied.forbidden(f"This API key lacks the '{scope}' scope.")
    if deployment is not None and not deployment_allowed(api_key, deployment):
        name = deployment if isinstance(deployment, str) else getattr(deployment, "name", "?")
        raise AccessDenied.forbidden(f"This API key may not use deployment '{name}'.")


def is_admin(user, api_key: ApiKey | None) -> bool:
    return user is not None and user.is_authenticated and Scope.ADMIN in principal_scopes(user, api_key)


class ScopePermission(BasePermission):
    """DRF permission: the request's principal holds `scope`; a `deployment` URL kwarg (or the
    view's `deployment_url_kwarg`) must be in the key's allow-list."""

    scope: str = ""

    def has_permission(self, request, view) -> bool:
        kwarg = getattr(view, "deployment_url_kwarg", "deployment")
        deployment = getattr(view, "kwargs", {}).get(kwarg)
        _drf_check(request, self.scope, deployment)
        return True

    def has_object_permission(self, request, view, obj) -> bool:
        deployment = getattr(obj, "deployment_name", None)
        if deployment is not None:
            _drf_check(request, self.scope, deployment)
        return True


def require_scope(scope: str) -> type[ScopePermission]:
    if scope not in ALL_SCOPES:
        raise ValueError(f"unknown scope {scope!r}")
    return type(f"Require_{scope.replace(':', '_')}", (ScopePermission,), {"scope": scope})


def _drf_check(request, scope: str, deployment) -> None:
    api_key = request.auth if isinstance(request.auth, ApiKey) else None
    try:
        check_access(request.user, api_key, scope, deployment)
    except AccessDenied as denied:
        if denied.status == 401:
            raise exceptions.NotAuthenticated(denied.message) from None
        raise exceptions.PermissionDenied(denied.message) from None


def _staff_admin(user) -> frozenset[str]:
    return frozenset({Scope.ADMIN}) if user.is_staff else frozenset()
