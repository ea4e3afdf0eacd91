from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "control_plane.deployments"
    label = "deployments"
    verbose_name = "Deployments"
