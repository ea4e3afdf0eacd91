"""The system check that keeps every admin page of an audited model recording its changes."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core import checks

from control_plane.accounts.models import Quota
from control_plane.audit.checks import audited_admins


def test_the_platform_admins_all_record_their_changes():
    assert audited_admins(None) == []
    assert not [error for error in checks.run_checks(tags=["admin"]) if error.id == "omnistage.E101"]


def test_an_admin_that_would_change_an_audited_model_unrecorded_is_an_error():
    class QuotaInline(admin.TabularInline):
        model = Quota
        fk_name = "user"

    class PlainUserAdmin(admin.ModelAdmin):
        inlines = [QuotaInline]

    site = admin.AdminSite(name="unaudited")
    site.register(Quota)
    site.register(get_user_model(), PlainUserAdmin)
    errors = audited_admins(None, site=site)
    assert [error.id for error in errors] == ["omnistage.E101", "omnistage.E101"]
    assert any("PlainUserAdmin changes accounts.quota" in error.msg for error in errors)
