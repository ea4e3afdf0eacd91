"""Error pages in the console's layout. The API's paths keep Django's plain answers: their clients
read status codes, not pages.

The 500 page renders without the request's context (no user, no navigation): whatever failed may
be the database those need.
"""

from __future__ import annotations

from django.http import HttpResponseServerError
from django.template import loader
from django.views import defaults

from console.pages import render_page

API_PREFIXES = ("/v1/", "/api/", "/admin/")


def _is_api(request) -> bool:
    return request.path.startswith(API_PREFIXES)


def page_not_found(request, exception):
    if _is_api(request):
        return defaults.page_not_found(request, exception)
    context = {"code": 404, "heading": "Page not found", "path": request.path}
    return render_page(request, "console/error.html", context, status=404)


def permission_denied(request, exception):
    if _is_api(request):
        return defaults.permission_denied(request, exception)
    context = {
        "code": 403,
        "heading": "Not allowed",
        "detail": str(exception) or "Your account may not open this page.",
    }
    return render_page(request, "console/error.html", context, status=403)


def server_error(request):
    if _is_api(request):
        return defaults.server_error(request)
    context = {"code": 500, "heading": "Something went wrong", "bare": True}
    return HttpResponseServerError(loader.get_template("console/error.html").render(context))
