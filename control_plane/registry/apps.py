from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "control_plane.registry"
    label = "registry"
    verbose_name = "Models"
