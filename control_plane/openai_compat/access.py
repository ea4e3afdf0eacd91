"""Who calls /v1: the principal of the request (an API key, else the session) holding the
inference scope. Which deployment they may call is the request run's first check
(control_plane/inference/targets.py)."""

from __future__ import annotations

from control_plane.accounts.permissions import check_access
from control_plane.accounts.principal import arequest_principal
from control_plane.inference.targets import INFERENCE, Caller


async def authenticate(request) -> Caller:
    """The caller holding the inference scope; AccessDenied (401/403) otherwise."""
    user, api_key = await arequest_principal(request)
    check_access(user, api_key, INFERENCE)
    return Caller(user, api_key, trace=request.headers.get("traceparent", "")[:100])
