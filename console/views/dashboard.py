from django.shortcuts import render

from console.access import signed_in
from console.dashboard_data import PERCENTILES, dashboard_rows
from console.pages import render_page
from control_plane.system.readiness import platform_status


def _context() -> dict:
    return {"rows": dashboard_rows(), "percentiles": PERCENTILES, "components": platform_status()}


@signed_in
def dashboard(request):
    return render_page(request, "console/dashboard.html", _context(), active="dashboard")


@signed_in
def dashboard_panel(request):
    """The live part of the dashboard, polled by htmx."""
    return render(request, "console/partials/dashboard_panel.html", _context())
