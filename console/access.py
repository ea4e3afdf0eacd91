"""Who may see what in the console. Decisions come from the accounts app; this module only
turns them into view decorators and template flags."""

from __future__ import annotations

from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from control_plane.accounts.permissions import is_admin


def user_is_admin(user) -> bool:
    return is_admin(user, None)


def can_manage_deployments(user) -> bool:
    """Deploying, scaling and stopping need staff (as the deployments REST API decides for sessions)."""
    return user.is_authenticated and user.is_active and user.is_staff


def signed_in(view):
    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.user.is_authenticated or not request.user.is_active:
            return redirect_to_login(request.get_full_path(), reverse("console:login"))
        return view(request, *args, **kwargs)

    return wrapper


def manages_deployments(view):
    @signed_in
    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not can_manage_deployments(request.user):
            raise PermissionDenied("Managing deployments needs a staff account.")
        return view(request, *args, **kwargs)

    return wrapper


def navigation(request) -> dict:
    """Context processor: the navigation entries this user may use."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"nav": []}
    items = [
        ("dashboard", "Dashboard", reverse("console:dashboard")),
        ("deployments", "Deployments", reverse("console:deployments")),
        ("devices", "Devices", reverse("console:devices")),
        ("catalog", "Catalog", reverse("console:catalog")),
        ("models", "Models", reverse("console:models")),
        ("chat", "Chat", reverse("console:playground", args=["chat"])),
        ("image", "Image", reverse("console:playground", args=["image"])),
        ("speech", "Speech", reverse("console:playground", args=["speech"])),
        ("video", "Video", reverse("console:playground", args=["video"])),
        ("voice", "Voice", reverse("console:voice")),
        ("history", "History", reverse("console:history")),
        ("keys", "API keys", reverse("console:keys")),
        ("usage", "Usage", reverse("console:usage")),
    ]
    if user_is_admin(user):
        items.append(("audit", "Audit", reverse("console:audit")))
        items.append(("admin", "Admin", reverse("admin:index")))
    return {"nav": items, "is_admin": user_is_admin(user), "can_deploy": can_manage_deployments(user)}
