"""Error responses in OpenAI's shape, for the /v1 views:

    {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}

OpenAI's clients turn the status into an exception class (401 AuthenticationError, 403
PermissionDeniedError, 429 RateLimitError) and honour Retry-After / retry-after-ms.
"""

from __future__ import annotations

from django.http import JsonResponse

from control_plane.accounts.permissions import AccessDenied
from control_plane.accounts.quota import QuotaExceeded


def openai_error_body(message: str, *, type: str, code: str | None = None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def openai_error_response(
    status: int,
    message: str,
    *,
    type: str,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JsonResponse:
    response = JsonResponse(openai_error_body(message, type=type, code=code, param=param), status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def access_denied_response(denied: AccessDenied) -> JsonResponse:
    if denied.status == 401:
        return openai_error_response(
            401, denied.message, type="invalid_request_error", code=denied.code, headers={"WWW-Authenticate": "Bearer"}
        )
    return openai_error_response(403, denied.message, type="permission_error", code=denied.code)


def quota_exceeded_response(exceeded: QuotaExceeded) -> JsonResponse:
    """429 with Retry-After, retry-after-ms and the x-ratelimit-* headers."""
    return openai_error_response(
        429, exceeded.message, type=exceeded.error_type, code="rate_limit_exceeded", headers=exceeded.headers
    )


def quota_unavailable_response() -> JsonResponse:
    return openai_error_response(
        503,
        "Quota service temporarily unavailable; please retry.",
        type="server_error",
        code="service_unavailable",
        headers={"Retry-After": "1"},
    )
