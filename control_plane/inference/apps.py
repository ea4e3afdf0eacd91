from django.apps import AppConfig


class InferenceConfig(AppConfig):
    name = "control_plane.inference"
    label = "inference"
    verbose_name = "Inference"
