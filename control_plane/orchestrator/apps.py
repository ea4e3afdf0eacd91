from django.apps import AppConfig


class OrchestratorConfig(AppConfig):
    name = "control_plane.orchestrator"
    label = "orchestrator"
    verbose_name = "Orchestrator"
