"""Audit entries for changes made in Django's admin, through the hooks it calls for its own log.

The admin saves a form and logs it in one transaction (changeform, delete and list-editable views);
actions, which it does not wrap, run in one here. Inline formsets (quotas on the user page) are
recorded per row, since the admin logs them as a change of the parent.
"""

from __future__ import annotations

from django.db import transaction

from control_plane.audit.models import Action
from control_plane.audit.services import audit_record, target_kind_of

VERBS = {"add": "create", "change": "change", "delete": "delete"}


def action_for(obj, verb: str) -> str | None:
    """The audited action for a create/change/delete of `obj`; None for models the log does not cover."""
    action = f"{target_kind_of(obj)}.{verb}"
    return action if action in Action.values else None


def form_changes(form) -> dict:
    return {name: {"from": form.initial.get(name), "to": form.cleaned_data.get(name)} for name in form.changed_data}


class AuditedAdminMixin:
    """Put first in a ModelAdmin's bases: records creations, changes (with a diff) and deletions of
    audited models, its own and those of its inlines."""

    def save_form(self, request, form, change):
        obj = super().save_form(request, form, change)
        obj._audit_changes = form_changes(form) if change else {}
        return obj

    def log_addition(self, request, obj, message):
        _record(request, obj, "create")
        return super().log_addition(request, obj, message)

    def log_change(self, request, obj, message):
        changes = obj.__dict__.pop("_audit_changes", None)
        if changes:
            _record(request, obj, "change", {"changes": changes})
        return super().log_change(request, obj, message)

    def log_deletions(self, request, queryset):
        for obj in queryset:
            _record(request, obj, "delete")
        return super().log_deletions(request, queryset)

    def response_action(self, request, queryset):
        with transaction.atomic(using=queryset.db):
            return super().response_action(request, queryset)

    def save_formset(self, request, form, formset, change):
        changes = {f.instance.pk: form_changes(f) for f in formset.initial_forms if f.instance.pk and f.has_changed()}
        super().save_formset(request, form, formset, change)
        for obj in formset.new_objects:
            _record(request, obj, "create")
        for obj, _fields in formset.changed_objects:
            _record(request, obj, "change", {"changes": changes.get(obj.pk, {})})
        for obj in formset.deleted_objects:
            _record(request, obj, "delete")


def _record(request, obj, verb: str, details: dict | None = None) -> None:
    action = action_for(obj, verb)
    if action is not None:
        audit_record(request, action, obj, details)
