from django.apps import AppConfig


class SystemConfig(AppConfig):
    name = "control_plane.system"
    label = "system"
    verbose_name = "System"

    def ready(self) -> None:
        from control_plane.system import checks  # noqa: F401 - registers the system checks
