from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect

from console.access import signed_in, user_is_admin
from console.pages import render_page
from control_plane.registry.archive_import import model_import_archive
from control_plane.registry.hub_import import model_import_hub
from control_plane.registry.imports import ImportInvalid
from control_plane.registry.queries import model_families, model_list


@signed_in
def models(request):
    errors: dict[str, str] = {}
    if request.method == "POST":
        if not user_is_admin(request.user):
            raise PermissionDenied("Importing a model needs an admin.")
        errors = _import(request)
        if not errors:
            return redirect("console:models")
    filters = {"search": request.GET.get("q", "").strip(), "family": request.GET.get("family", "")}
    context = {
        "models": model_list(**filters),
        "families": model_families(),
        "filters": filters,
        "errors": errors,
        "posted": request.POST if errors else {},
        "can_import": user_is_admin(request.user),
    }
    return render_page(request, "console/models.html", context, active="models", status=400 if errors else 200)


def _import(request) -> dict[str, str]:
    """Start the import the form asks for; the errors by field (none: it started)."""
    name = request.POST.get("name", "").strip()
    try:
        if request.POST.get("source") == "archive":
            upload = request.FILES.get("archive")
            if upload is None:
                return {"archive": "choose a tar or zip file"}
            model = model_import_archive(upload=upload, name=name, user=request.user)
            messages.success(request, f"Imported “{model.name}” from {upload.name}.")
        else:
            model = model_import_hub(repo_id=request.POST.get("hub", ""), revision=request.POST.get("revision", ""),
                                     name=name, user=request.user)  # fmt: skip
            notice = f"Importing “{model.name}” from {model.hub_repo}: the bar below shows the download; deploy it once ready."
            messages.success(request, notice)
    except ImportInvalid as invalid:
        return {invalid.field: invalid.message}
    return {}
