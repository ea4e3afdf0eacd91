from console.access import signed_in
from console.pages import render_page
from control_plane.registry.queries import model_families, model_list


@signed_in
def models(request):
    filters = {"search": request.GET.get("q", "").strip(), "family": request.GET.get("family", "")}
    context = {"models": model_list(**filters), "families": model_families(), "filters": filters}
    return render_page(request, "console/models.html", context, active="models")
