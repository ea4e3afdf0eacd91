from django.http import FileResponse, Http404
from django.shortcuts import get_object_or_404

from console.access import signed_in, user_is_admin
from console.history import ROUTE_CHOICES, STATUSES, history_get, history_search, input_text
from console.pages import render_page

PAGE_SIZE = 50


@signed_in
def history(request):
    filters = {
        "text": request.GET.get("q", "").strip(),
        "status": request.GET.get("status", ""),
        "route": request.GET.get("route", ""),
        "deployment": request.GET.get("deployment", "").strip(),
        "username": request.GET.get("user", "").strip(),
    }
    rows = list(history_search(request.user, **filters)[:PAGE_SIZE])
    for row in rows:
        row.input_text = input_text(row)
    context = {"rows": rows, "filters": filters, "statuses": STATUSES, "routes": ROUTE_CHOICES}
    context["show_users"] = user_is_admin(request.user)
    return render_page(request, "console/history.html", context, active="history")


@signed_in
def history_detail(request, request_id: str):
    row = history_get(request.user, request_id)
    if row is None:
        raise Http404("no such request")
    stage_rows = [{"stage": name, **values} for name, values in (row.stage_metrics or {}).items()]
    context = {"row": row, "artifacts": row.artifacts.all(), "stage_rows": stage_rows, "input_text": input_text(row)}
    context["show_users"] = user_is_admin(request.user)
    return render_page(request, "console/history_detail.html", context, active="history")


@signed_in
def artifact_file(request, request_id: str, artifact_id):
    """An artifact's bytes, for its owner (or an admin) only."""
    row = history_get(request.user, request_id)
    if row is None:
        raise Http404("no such request")
    artifact = get_object_or_404(row.artifacts, pk=artifact_id)
    download = request.GET.get("download") == "1"
    filename = artifact.file.name.rpartition("/")[2]
    response = FileResponse(artifact.file.open("rb"), content_type=artifact.mime_type, as_attachment=download,
                            filename=f"{row.request_id}-{filename}")  # fmt: skip
    response["Cache-Control"] = "private, max-age=3600"
    return response
