"""OpenAI-shaped errors for /v1, and the decorator every /v1 view wears.

`ApiError` is raised anywhere in a view; `openai_endpoint` turns it (and access denials,
quota refusals, unexpected crashes) into `{"error": {"message", "type", "param", "code"}}`
with the right status and headers. Nothing under /v1 answers Django's HTML pages.
"""

from __future__ import annotations

import functools
import logging

from django.http import HttpResponseBase, JsonResponse

from control_plane.accounts.openai_errors import (
    access_denied_response,
    openai_error_response,
    quota_exceeded_response,
    quota_unavailable_response,
)
from control_plane.accounts.permissions import AccessDenied
from control_plane.accounts.quota import QuotaExceeded, QuotaUnavailable
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
        return openai_error_response(
            self.status, self.message, type=self.type, code=self.code, param=self.param, headers=self.headers
        )


def stage_error_to_api(error: StageError) -> ApiError:
    """How a failure reported by the serving path reaches the client."""
    if error.code == "queue_full":
        return ApiError(503, error.message, code="queue_full", type="server_overloaded", headers={"Retry-After": "1"})
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


def error_response(error: Exception) -> HttpResponseBase:
    if isinstance(error, ApiError):
        return error.response()
    if isinstance(error, AccessDenied):
        return access_denied_response(error)
    if isinstance(error, QuotaExceeded):
        return quota_exceeded_response(error)
    if isinstance(error, QuotaUnavailable):
        return quota_unavailable_response()
    log.exception("unhandled error in a /v1 view", exc_info=error)
    return openai_error_response(500, "The server had an error while processing your request.", type="server_error")


KNOWN_ERRORS = (ApiError, AccessDenied, QuotaExceeded, QuotaUnavailable)


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
