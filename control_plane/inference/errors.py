"""Errors in OpenAI's shape, for every interface that serves requests:

    {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}

`ApiError` is what a request run records in its history row and what the interfaces render:
the /v1 views as a JSON response (`openai_endpoint` wraps them), realtime as an `error`
event or a failed response, the console as a field error. `as_api_error` turns every other
failure (access denials, quota refusals, an unavailable serving path, a stage's error, a
crash) into one. OpenAI's clients turn the status into an exception class (401
AuthenticationError, 403 PermissionDeniedError, 429 RateLimitError) and honour
Retry-After / retry-after-ms.
"""

from __future__ import annotations

import functools
import logging
import math

from django.http import HttpResponseBase, JsonResponse

from control_plane.accounts.permissions import AccessDenied
from control_plane.accounts.quota import QuotaExceeded, QuotaUnavailable
from control_plane.orchestrator.serving import ServingUnavailable
from stages.protocol import StageError

log = logging.getLogger(__name__)

TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    409: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "service_unavailable",
    504: "timeout_error",
}


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or TYPES.get(status, "server_error")
        self.headers = headers or {}

    @classmethod
    def invalid(cls, param: str | None, message: str, code: str | None = "invalid_value") -> ApiError:
        return cls(400, message, param=param, code=code)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JsonResponse:
        response = JsonResponse(self.body(), status=self.status)
        for name, value in self.headers.items():
            response[name] = value
        return response


def stage_error_to_api(error: StageError) -> ApiError:
    """How a failure reported by the serving path reaches the client."""
    if error.code in ("queue_full", "overloaded"):
        retry_after = str(max(1, math.ceil(error.retry_after_s or 1)))
        return ApiError(503, error.message, code=error.code, type="server_overloaded",
                        headers={"Retry-After": retry_after})  # fmt: skip
    if error.code == "unknown_deployment":
        message = "The model is starting and cannot take requests yet; retry shortly."
        return ApiError(503, message, code="model_not_ready", headers={"Retry-After": "2"})
    if error.type == "invalid_request_error":
        return ApiError(400, error.message, param=error.param, code=error.code or "invalid_value")
    if error.type == "timeout_error":
        return ApiError(504, error.message, code=error.code or "timeout", type="timeout_error")
    if error.type == "cancelled":
        return ApiError(503, error.message, code=error.code or "cancelled", headers={"Retry-After": "1"})
    return ApiError(500, error.message, code=error.code or "engine_error", type="server_error")


def access_denied_error(denied: AccessDenied) -> ApiError:
    if denied.status == 401:
        return ApiError(401, denied.message, type="invalid_request_error", code=denied.code,
                        headers={"WWW-Authenticate": "Bearer"})  # fmt: skip
    return ApiError(403, denied.message, type="permission_error", code=denied.code)


def quota_exceeded_error(exceeded: QuotaExceeded) -> ApiError:
    """429 with Retry-After, retry-after-ms and the x-ratelimit-* headers."""
    return ApiError(429, exceeded.message, type=exceeded.error_type, code="rate_limit_exceeded",
                    headers=exceeded.headers)  # fmt: skip


def quota_unavailable_error() -> ApiError:
    return ApiError(503, "Quota service temporarily unavailable; please retry.", type="server_error",
                    code="service_unavailable", headers={"Retry-After": "1"})  # fmt: skip


def as_api_error(error: BaseException) -> ApiError:
    """Any failure of a request as the error its client sees (a crash: a 500 naming its class)."""
    if isinstance(error, ApiError):
        return error
    if isinstance(error, AccessDenied):
        return access_denied_error(error)
    if isinstance(error, QuotaExceeded):
        return quota_exceeded_error(error)
    if isinstance(error, QuotaUnavailable):
        return quota_unavailable_error()
    if isinstance(error, ServingUnavailable):
        return ApiError(503, str(error), code="service_unavailable", headers={"Retry-After": "2"})
    if isinstance(error, StageError):
        return stage_error_to_api(error)
    return ApiError(500, f"{type(error).__name__}: {error}", code="internal_error")


KNOWN_ERRORS = (ApiError, AccessDenied, QuotaExceeded, QuotaUnavailable, ServingUnavailable)


def error_response(error: Exception) -> HttpResponseBase:
    if isinstance(error, KNOWN_ERRORS):
        return as_api_error(error).response()
    log.exception("unhandled error in a /v1 view", exc_info=error)
    return ApiError(500, "The server had an error while processing your request.", type="server_error").response()


def openai_endpoint(*methods: str):
    """Wrap an async view: allowed methods, CSRF exemption (keys, not cookies; sessions are
    CSRF-checked by the accounts principal), and every failure in OpenAI's error shape."""

    def decorate(view):
        @functools.wraps(view)
        async def wrapper(request, *args, **kwargs):
            if request.method not in methods:
                allowed = ", ".join(methods)
                error = ApiError(405, f"Method {request.method} is not allowed here (allowed: {allowed}).")
                response = error.response()
                response["Allow"] = allowed
                return response
            try:
                return await view(request, *args, **kwargs)
            except Exception as error:  # noqa: BLE001 - every failure answers the OpenAI shape
                return error_response(error)

        wrapper.csrf_exempt = True
        return wrapper

    return decorate
