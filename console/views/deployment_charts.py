from django.http import JsonResponse
from django.shortcuts import get_object_or_404

from console.access import signed_in
from console.deployment_charts import chart_window, deployment_charts
from control_plane.deployments.queries import deployment_list


@signed_in
def deployment_charts_data(request, name: str):
    """The deployment page's chart data (`?window=hour|day`), polled by deployment_charts.js."""
    deployment = get_object_or_404(deployment_list(), name=name)
    response = JsonResponse(deployment_charts(deployment, chart_window(request.GET.get("window"))))
    response["Cache-Control"] = "no-store"
    return response
