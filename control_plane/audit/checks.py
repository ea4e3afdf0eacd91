"""System check: every admin page that can change an audited model records what it changes."""

from __future__ import annotations

from django.contrib import admin
from django.core.checks import Error

from control_plane.audit.admin_mixin import AuditedAdminMixin
from control_plane.audit.target_details import AUDITED_MODELS


def audited_admins(app_configs, site: admin.AdminSite | None = None, **kwargs) -> list[Error]:
    errors = []
    for model, model_admin in (site or admin.site)._registry.items():
        changed = {model, *(inline.model for inline in model_admin.inlines)}
        audited = sorted(m._meta.label_lower for m in changed if m._meta.label_lower in AUDITED_MODELS)
        if audited and not isinstance(model_admin, AuditedAdminMixin):
            errors.append(
                Error(
                    f"{type(model_admin).__name__} changes {', '.join(audited)} without recording it in the audit log.",
                    hint="Put control_plane.audit.admin_mixin.AuditedAdminMixin first in its bases.",
                    obj=type(model_admin),
                    id="omnistage.E101",
                )
            )
    return errors
