"""Where a change came from: the client's IP and the interface (console, REST API, admin)."""

from __future__ import annotations

from ipaddress import ip_address

from control_plane.accounts.login_throttle import client_ip as platform_client_ip
from control_plane.audit.models import Channel


def client_ip(request) -> str | None:
    """The platform's one idea of the client IP (REMOTE_ADDR, set by the proxy in front if any),
    or None when it is not an address."""
    candidate = platform_client_ip(request)
    try:
        return str(ip_address(candidate))
    except ValueError:
        return None


def channel_of(request) -> str:
    path = getattr(request, "path", "") or ""
    if path.startswith("/admin/"):
        return Channel.ADMIN
    if path.startswith(("/api/", "/v1/")):
        return Channel.API
    return Channel.CONSOLE
