"""Reading request bodies: size limits, JSON, multipart, and typed conversion whose errors
name the offending field (`param`) the way OpenAI does (`messages[0].content`)."""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

import msgspec
from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.http.multipartparser import MultiPartParserError

from control_plane.inference.errors import ApiError
from control_plane.system.json_bounds import HostileJson, check_json_values

T = TypeVar("T")
_AT = re.compile(r" - at `\$(.*)`$")


def max_request_bytes() -> int:
    return int(getattr(settings, "MAX_REQUEST_BYTES", 20 * 1024 * 1024))


def check_size(request) -> None:
    declared = request.META.get("CONTENT_LENGTH") or "0"
    try:
        size = int(declared)
    except ValueError:
        raise ApiError(400, "Invalid Content-Length header.", code="invalid_request") from None
    limit = max_request_bytes()
    if size > limit:
        raise ApiError(
            413, f"Request body of {size} bytes exceeds this server's limit of {limit} bytes.", code="request_too_large"
        )


def read_json(request) -> dict[str, Any]:
    """The JSON object of a POST body, or a 400/413/415 ApiError."""
    check_size(request)
    content_type = request.content_type or ""
    if content_type and content_type not in ("application/json", "text/plain") and not content_type.endswith("+json"):
        raise ApiError(415, f"Expected an application/json body, got {content_type!r}.", code="unsupported_media_type")
    raw = request.read(max_request_bytes() + 1)  # not request.body: our limit, not DATA_UPLOAD_MAX_MEMORY_SIZE
    if len(raw) > max_request_bytes():
        raise ApiError(413, "Request body exceeds this server's size limit.", code="request_too_large")
    try:
        data = json.loads(raw)
    except RecursionError:
        raise ApiError(400, "The JSON body is nested too deeply.", code="invalid_json") from None
    except (ValueError, UnicodeDecodeError) as error:
        message = (
            "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your "
            f"HTTP library correctly. The OpenAI API expects a JSON payload.) Parser error: {error}"
        )
        raise ApiError(400, message, code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "The request body must be a JSON object.", code="invalid_json")
    checked(data)
    return data


def checked(data: Any) -> None:
    try:
        check_json_values(data)
    except HostileJson as error:
        raise ApiError(400, error.message, param=error.param, code="invalid_value") from None


def read_form(request) -> tuple[dict[str, list[str]], dict[str, list[Any]]]:
    """(fields, files) of a multipart/form-data (or urlencoded) POST."""
    check_size(request)
    if not (request.content_type or "").startswith(("multipart/form-data", "application/x-www-form-urlencoded")):
        raise ApiError(415, "Expected a multipart/form-data body for this endpoint.", code="unsupported_media_type")
    try:
        fields = {key: request.POST.getlist(key) for key in request.POST}
        files = {key: request.FILES.getlist(key) for key in request.FILES}
    except (RequestDataTooBig, TooManyFieldsSent) as error:
        raise ApiError(413, f"The form is too large: {error}", code="request_too_large") from None
    except MultiPartParserError as error:
        raise ApiError(400, f"Malformed multipart body: {error}", code="invalid_multipart") from None
    return fields, files


def convert(data: Any, kind: type[T], *, strict: bool = True) -> T:
    """msgspec conversion (strict for JSON; lax for form fields, which are all strings);
    a ValidationError becomes a 400 naming the field."""
    try:
        converted = msgspec.convert(data, kind, strict=strict)
    except msgspec.ValidationError as error:
        text = str(error)
        match = _AT.search(text)
        param = _param_of(match.group(1)) if match else None
        message = _AT.sub("", text)
        if message.startswith("Object missing required field"):
            field = message.split("`")[1]
            param = f"{param}.{field}" if param else field
            raise ApiError(
                400, f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
            ) from None
        where = f" for '{param}'" if param else ""
        raise ApiError(400, f"Invalid value{where}: {message}.", param=param, code="invalid_type") from None
    if not strict:  # form fields were strings: their numbers are only known now
        checked(msgspec.to_builtins(converted))
    return converted


def _param_of(path: str) -> str | None:
    path = path.lstrip(".")
    return path or None


def require(value: Any, param: str) -> Any:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ApiError(400, f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")
    return value
