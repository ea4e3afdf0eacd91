"""The Devices page: every worker pool, its hosts and devices with memory and utilisation, and the
replicas placed on each, from the heartbeats (polled by htmx)."""

from django.shortcuts import render

from console.access import signed_in
from console.pages import render_page
from control_plane.deployments.heartbeat_devices import device_inventory


@signed_in
def devices(request):
    return render_page(request, "console/devices.html", {"pools": device_inventory()}, active="devices")


@signed_in
def devices_panel(request):
    """The live part of the Devices page."""
    return render(request, "console/partials/devices_panel.html", {"pools": device_inventory()})
