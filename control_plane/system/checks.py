"""System checks for configuration that must hold before anything starts."""

from __future__ import annotations

from django.apps import apps
from django.conf import settings
from django.core.checks import Error, register


@register()
def every_app_has_a_migration_module(app_configs, **kwargs) -> list[Error]:
    """Our apps keep their migrations under migrations/<label>/ (DESIGN.md §1)."""
    modules = getattr(settings, "MIGRATION_MODULES", {}) or {}
    errors = []
    for config in apps.get_app_configs():
        ours = config.name.startswith(("control_plane.", "console"))
        if ours and config.label not in modules:
            errors.append(
                Error(
                    f"App '{config.label}' has no MIGRATION_MODULES entry.",
                    hint=f"Add MIGRATION_MODULES['{config.label}'] = 'migrations.{config.label}' in settings.",
                    id="omnistage.E001",
                )
            )
    return errors


@register()
def visibility_timeout_outlasts_tasks(app_configs, **kwargs) -> list[Error]:
    """Redis redelivers an unacknowledged task after the visibility timeout: it must outlast every task."""
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}) or {}
    visibility = options.get("visibility_timeout", 3600)
    if visibility <= settings.LONGEST_TASK_S:
        return [
            Error(
                f"Celery visibility timeout ({visibility} s) must exceed the longest task ({settings.LONGEST_TASK_S} s).",
                hint="Raise OMNISTAGE_VISIBILITY_TIMEOUT_S or lower OMNISTAGE_LONGEST_TASK_S.",
                id="omnistage.E002",
            )
        ]
    return []


@register()
def prefetch_is_one(app_configs, **kwargs) -> list[Error]:
    if getattr(settings, "CELERY_WORKER_PREFETCH_MULTIPLIER", 1) != 1:
        return [Error("CELERY_WORKER_PREFETCH_MULTIPLIER must be 1 (long lifecycle tasks).", id="omnistage.E003")]
    return []
