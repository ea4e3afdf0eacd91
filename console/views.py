from django.shortcuts import render

from control_plane.system.readiness import platform_status


def home(request):
    return render(request, "console/home.html", {"components": platform_status()})
