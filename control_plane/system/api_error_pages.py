"""What the API's paths answer where Django would render an error page (a URL that matches no
route, a denial or a failure outside a view's own handling): JSON a client can read, in OpenAI's
error shape under /v1/ and as `{"detail": ...}` under /api/ (DRF's shape)."""

from __future__ import annotations

from django.http import JsonResponse

from control_plane.inference.errors import ApiError

MESSAGES = {  # status: (message, code)
    403: ("You do not have permission to perform this action.", "permission_denied"),
    404: ("Not found.", "not_found"),
    500: ("The server had an error while processing your request.", "server_error"),
}


def is_api_path(path: str) -> bool:
    return path.startswith(("/v1/", "/api/"))


def api_error_page(path: str, status: int) -> JsonResponse:
    message, code = MESSAGES[status]
    if path.startswith("/v1/"):
        return ApiError(status, message, code=code).response()
    return JsonResponse({"detail": message}, status=status)
