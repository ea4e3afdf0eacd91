"""The Celery lifecycle tasks a replica's host is started and stopped with, sent to the replica's
pool: the reconciler sends both, deleting a deployment stops its replicas at once."""

from __future__ import annotations

import msgspec

from control_plane.celery import app as celery_app
from control_plane.deployments.models import DeploymentRevision, Replica
from stages.config import load_deploy_config, load_pipeline_config
from stages.protocol import ReplicaSpec


def replica_spec(replica: Replica) -> ReplicaSpec:
    deployment = replica.deployment
    pipeline = load_pipeline_config(deployment.pipeline.config)
    deploy = load_deploy_config(replica_config(replica))
    stage_deploy = deploy.for_stage(pipeline.stage_named(replica.stage))
    members = {name: deploy.for_stage(pipeline.stage_named(name)) for name in replica.members}
    return ReplicaSpec(
        replica_id=str(replica.id),
        deployment_id=str(deployment.id),
        family=deployment.pipeline.family,
        pipeline=pipeline,
        stage=replica.stage,
        stage_id=replica.stage_id,
        model_dir=deployment.model_dir,
        stage_deploy=stage_deploy,
        device=replica.device,
        group=replica.group,
        members=members if replica.group else {},
    )


def replica_config(replica: Replica) -> dict:
    """The DeployConfig a replica runs: its revision's (during a rollout, not yet the deployment's)."""
    deployment = replica.deployment
    if replica.revision == deployment.revision:
        return deployment.deploy_config
    config = (
        DeploymentRevision.objects.filter(deployment_id=deployment.pk, number=replica.revision)
        .values_list("config", flat=True)
        .first()
    )
    return deployment.deploy_config if config is None else config


def start_replica(replica: Replica) -> None:
    spec = msgspec.to_builtins(replica_spec(replica))
    celery_app.send_task("workers.start_replica", args=[spec], queue=replica.pool)


def stop_replica(replica: Replica) -> None:
    celery_app.send_task("workers.stop_replica", args=[str(replica.id)], queue=replica.pool)
