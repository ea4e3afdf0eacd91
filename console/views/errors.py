"""Error pages in the console's layout. The API's paths answer JSON in their own error shapes
(control_plane/system/api_error_pages.py); the admin keeps Django's plain pages.

The 500 page renders without the request's context (no user, no navigation): whatever failed may
be the database those need.
"""

from __future__ import annotations

from django.http import HttpResponseServerError
from django.template import loader
from django.views import defaults

from console.pages import render_page
from control_plane.system.api_error_pages import api_error_page, is_api_path


def _is_admin(request) -> bool:
    return request.path.startswith("/admin/")


def page_not_found(request, exception):
    if is_api_path(request.path):
        return api_error_page(request.path, 404)
    if _is_admin(request):
        return defaults.page_not_found(request, exception)
    context = {"code": 404, "heading": "Page not found", "path": request.path}
    return render_page(request, "console/error.html", context, status=404)


def permission_denied(request, exception):
    if is_api_path(request.path):
        return api_error_page(request.path, 403)
    if _is_admin(request):
        return defaults.permission_denied(request, exception)
    context = {
        "code": 403,
        "heading": "Not allowed",
        "detail": str(exception) or "Your account may not open this page.",
    }
    return render_page(request, "console/error.html", context, status=403)


def server_error(request):
    if is_api_path(request.path):
        return api_error_page(request.path, 500)
    if _is_admin(request):
        return defaults.server_error(request)
    context = {"code": 500, "heading": "Something went wrong", "bare": True}
    return HttpResponseServerError(loader.get_template("console/error.html").render(context))
