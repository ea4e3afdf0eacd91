"""Who is calling, for plain (non-DRF) Django views such as the async /v1 routes.

    user, api_key = await arequest_principal(request)        # raises AccessDenied (401)
    check_access(user, api_key, "inference", deployment)     # raises AccessDenied (403)

A Bearer key wins over a session. A session-authenticated unsafe request must carry a
valid CSRF token even when the view is csrf_exempt (as API views usually are), exactly as
DRF's SessionAuthentication does; key-authenticated requests need none.
"""

from __future__ import annotations

from rest_framework.authentication import CSRFCheck

from control_plane.accounts.permissions import AccessDenied
from control_plane.accounts.services import aapi_key_authenticate, api_key_authenticate

SAFE_METHODS = ("GET", "HEAD", "OPTIONS", "TRACE")


def request_principal(request):
    """(user, api_key or None) for a sync view; raises AccessDenied (401)."""
    secret = _bearer_secret(request)
    if secret is not None:
        return _principal_of_key(api_key_authenticate(secret))
    return _principal_of_session(request, request.user)


async def arequest_principal(request):
    """(user, api_key or None) for an async view; raises AccessDenied (401)."""
    secret = _bearer_secret(request)
    if secret is not None:
        return _principal_of_key(await aapi_key_authenticate(secret))
    return _principal_of_session(request, await request.auser())


def _bearer_secret(request) -> str | None:
    header = request.headers.get("Authorization", "")
    if not header:
        return None
    keyword, _, secret = header.partition(" ")
    if keyword.lower() != "bearer" or not secret.strip():
        raise AccessDenied.unauthenticated("Malformed Authorization header: expected 'Bearer <API key>'.")
    return secret.strip()


def _principal_of_key(key):
    if key is None:
        raise AccessDenied.unauthenticated("Invalid, expired or revoked API key.")
    return key.user, key


def _principal_of_session(request, user):
    if user is None or not user.is_authenticated:
        raise AccessDenied.unauthenticated()
    if request.method not in SAFE_METHODS:
        _enforce_csrf(request)
    return user, None


def _enforce_csrf(request) -> None:
    check = CSRFCheck(lambda _request: None)
    check.process_request(request)
    reason = check.process_view(request, None, (), {})
    if reason:
        raise AccessDenied.forbidden(f"CSRF failed: {reason}")
