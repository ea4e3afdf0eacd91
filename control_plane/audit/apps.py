from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "control_plane.audit"
    label = "audit"
    verbose_name = "Audit log"

    def ready(self) -> None:
        from django.core.checks import register

        from control_plane.audit.checks import audited_admins

        register(audited_admins, "admin")
