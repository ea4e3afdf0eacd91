"""Who may see what in the console. Decisions come from the accounts app; this module only
turns them into view decorators and template flags."""

from __future__ import annotations

from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404
from django.urls import reverse

from control_plane.accounts.permissions import is_admin
from control_plane.deployments.permissions import may_manage
from control_plane.deployments.queries import deployment_list


def user_is_admin(user) -> bool:
    return is_admin(user, None)


def can_deploy(user) -> bool:
    """Every active user may deploy, as their API keys may (`deployments:write` is a default scope)."""
    return user.is_authenticated and user.is_active


def can_manage_deployment(user, deployment) -> bool:
    """Scaling, stopping, starting and deleting a deployment: its creator and admins."""
    return can_deploy(user) and may_manage(user, None, deployment)


def signed_in(view):
    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.user.is_authenticated or not request.user.is_active:
            return redirect_to_login(request.get_full_path(), reverse("console:login"))
        return view(request, *args, **kwargs)

    return wrapper


def manages_deployment(view):
    """For views of one deployment (the `name` in the URL): only its creator and admins get in."""

    @signed_in
    @wraps(view)
    def wrapper(request, *args, name: str, **kwargs):
        deployment = get_object_or_404(deployment_list(), name=name)
        if not can_manage_deployment(request.user, deployment):
            raise PermissionDenied(f"Only the user who created {deployment.name} or an admin may change it.")
        return view(request, *args, name=name, **kwargs)

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
    return {"nav": items, "is_admin": user_is_admin(user), "can_deploy": can_deploy(user)}
