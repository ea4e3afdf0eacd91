from django.http import JsonResponse
from django.views.decorators.http import require_GET

from control_plane.system.readiness import as_json, platform_status


@require_GET
async def health(request):
    """Liveness: the web process answers (in its event loop: no thread, no database)."""
    return JsonResponse({"status": "ok"})


@require_GET
def ready(request):
    """Readiness: every component the platform needs is up; 503 names the ones that are not."""
    status = platform_status()
    failing = [name for name, component in status.items() if not component.ok]
    body = {"status": "unavailable" if failing else "ready", "failing": failing, "components": as_json(status)}
    return JsonResponse(body, status=503 if failing else 200)
