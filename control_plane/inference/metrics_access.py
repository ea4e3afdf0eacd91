"""Who may read /metrics: a scraper with the bearer token `OMNISTAGE_METRICS_TOKEN`, or a signed-in
staff user. The series are labelled with every user's deployment names, so nobody else may;
without a token configured only staff sessions can read them."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpResponse


def metrics_refusal(request) -> HttpResponse | None:
    """None when the caller may read the metrics, else the 401/403 to answer."""
    token = getattr(settings, "METRICS_TOKEN", "")
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if header:
        scheme, _, given = header.partition(" ")
        if scheme.lower() == "bearer" and token and hmac.compare_digest(given.strip().encode(), token.encode()):
            return None
        return _refuse(403, "The metrics token is not valid.\n")
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return None if user.is_active and user.is_staff else _refuse(403, "Metrics are for staff users.\n")
    response = _refuse(401, "Metrics need a bearer token (OMNISTAGE_METRICS_TOKEN) or a staff session.\n")
    response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


def _refuse(status: int, text: str) -> HttpResponse:
    return HttpResponse(text, status=status, content_type="text/plain")
