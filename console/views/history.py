from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.http import FileResponse, Http404
from django.shortcuts import get_object_or_404

from console.access import signed_in, user_is_admin
from console.history import ROUTE_CHOICES, STATUSES, HistoryFilters, history_get, history_search, input_text
from console.pages import render_page
from console.request_timeline import request_timeline

PAGE_SIZE = 50


@signed_in
def history(request):
    filters = HistoryFilters.from_params(request.GET)
    page = Paginator(history_search(request.user, filters), PAGE_SIZE).get_page(request.GET.get("page"))
    for row in page.object_list:
        row.input_text = input_text(row)
    context = {"rows": page.object_list, "page": page, "filters": filters, "statuses": STATUSES,
               "routes": ROUTE_CHOICES, "page_links": _page_links(page, filters)}  # fmt: skip
    context["show_users"] = user_is_admin(request.user)
    return render_page(request, "console/history.html", context, active="history")


def _page_links(page, filters: HistoryFilters) -> dict[str, str]:
    """Query strings of the neighbouring pages, with the filters kept."""

    def link(number: int) -> str:
        return "?" + urlencode({**filters.query_string(), "page": number})

    links = {}
    if page.has_previous():
        links["first"], links["previous"] = link(1), link(page.previous_page_number())
    if page.has_next():
        links["next"], links["last"] = link(page.next_page_number()), link(page.paginator.num_pages)
    return links


@signed_in
def history_detail(request, request_id: str):
    row = history_get(request.user, request_id)
    if row is None:
        raise Http404("no such request")
    stage_rows = [{"stage": name, **values} for name, values in (row.stage_metrics or {}).items()]
    context = {"row": row, "artifacts": row.artifacts.all(), "stage_rows": stage_rows, "input_text": input_text(row)}
    context["show_users"] = user_is_admin(request.user)
    context["timeline"] = request_timeline(row)
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
