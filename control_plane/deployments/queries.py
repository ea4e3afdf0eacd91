"""Read-side helpers for deployments (HackSoft's "selectors"; the name `selectors` would
shadow the standard library)."""

from __future__ import annotations

from django.db.models import QuerySet

from control_plane.deployments.models import Deployment, DeploymentState, Pipeline, Replica


def pipeline_list() -> QuerySet[Pipeline]:
    return Pipeline.objects.all()


def deployment_list() -> QuerySet[Deployment]:
    return Deployment.objects.select_related("pipeline").prefetch_related("replicas")


def deployment_get(name: str) -> Deployment | None:
    return deployment_list().filter(name=name).first()


def running_deployments() -> QuerySet[Deployment]:
    return deployment_list().filter(state=DeploymentState.RUNNING)


def replica_list(*, deployment: str | None = None) -> QuerySet[Replica]:
    replicas = Replica.objects.select_related("deployment")
    if deployment:
        replicas = replicas.filter(deployment__name=deployment)
    return replicas
