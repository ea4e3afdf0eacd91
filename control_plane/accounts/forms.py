"""Login forms that tell a throttled user why and for how long (admin and console)."""

from __future__ import annotations

import math

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm

from control_plane.accounts.login_throttle import client_ip, login_blocked_for


class ThrottledLoginMixin:
    def clean(self):
        username = self.cleaned_data.get("username")
        if username:
            blocked = login_blocked_for(username, client_ip(self.request))
            if blocked > 0:
                minutes = math.ceil(blocked / 60)
                raise forms.ValidationError(
                    f"Too many failed login attempts. Try again in {minutes} minute{'s' if minutes != 1 else ''}.",
                    code="throttled",
                )
        return super().clean()


class ThrottledAuthenticationForm(ThrottledLoginMixin, AuthenticationForm):
    """For the console's login view."""


class ThrottledAdminAuthenticationForm(ThrottledLoginMixin, AdminAuthenticationForm):
    """Installed on the admin site in admin.py."""
