from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "control_plane.deployments"
    label = "deployments"
    verbose_name = "Deployments"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from control_plane.deployments.models import Deployment, Pipeline
        from control_plane.deployments.served_cache import deployments_changed
        from control_plane.deployments.transitions import state_changed

        # the serving path's cache of running deployments, in every process (served_cache.py)
        state_changed.connect(deployments_changed, sender=Deployment, dispatch_uid="deployments.served_cache.moved")
        for model in (Deployment, Pipeline):
            for signal, event in ((post_save, "saved"), (post_delete, "deleted")):
                signal.connect(deployments_changed, sender=model, dispatch_uid=f"served_cache.{model.__name__}.{event}")
