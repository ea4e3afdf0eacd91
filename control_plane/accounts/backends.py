"""Authentication backend that refuses password logins while they are throttled."""

from __future__ import annotations

from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import PermissionDenied

from control_plane.accounts.login_throttle import client_ip, login_blocked_for


class ThrottledModelBackend(ModelBackend):
    """ModelBackend plus login_throttle: too many failures -> refused, even with the right password.

    Raising PermissionDenied stops `authenticate` at once (no other backend is tried)."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if username is not None and login_blocked_for(str(username), client_ip(request)) > 0:
            raise PermissionDenied("too many failed logins")
        return super().authenticate(request, username=username, password=password, **kwargs)
