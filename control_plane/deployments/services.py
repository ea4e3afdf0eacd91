"""Deployment lifecycle services: create, scale, stop, delete. The reconciler does the rest."""

from __future__ import annotations

import msgspec
from django.conf import settings
from django.db import transaction

from control_plane.deployments.checkpoint_check import CheckpointInvalid, checkpoint_check
from control_plane.deployments.heartbeats import live_devices
from control_plane.deployments.models import (
    Deployment,
    DeploymentRevision,
    DeploymentState,
    Pipeline,
    Replica,
    RevisionState,
)
from control_plane.deployments.replica_tasks import stop_replica
from control_plane.deployments.transitions import transition_from_current
from stages.config import DeployConfig, PipelineConfig, StageDeployConfig, load_deploy_config, load_pipeline_config
from stages.errors import ConfigError
from stages.groups import StageGroups


class DeploymentInvalid(Exception):
    """A bad deployment request; `field` is a dotted path into the request body."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def pipeline_config_of(pipeline: Pipeline) -> PipelineConfig:
    return load_pipeline_config(pipeline.config)


def validate_deploy_config(pipeline: Pipeline, data: dict) -> DeployConfig:
    """Parse and check a DeployConfig against the pipeline and the pools and devices we know."""
    config = pipeline_config_of(pipeline)
    try:
        deploy = load_deploy_config(data or {}, config)
    except ConfigError as error:
        raise DeploymentInvalid(f"deploy_config.{error.field}", error.message) from None
    devices = None
    for stage in config.stages:
        stage_deploy = deploy.for_stage(stage)
        path = f"deploy_config.stages.{stage.name}"
        if stage_deploy.pool not in settings.KNOWN_POOLS:
            raise DeploymentInvalid(
                f"{path}.pool", f"unknown pool {stage_deploy.pool!r} (known: {settings.KNOWN_POOLS})"
            )
        if stage_deploy.device != "cpu":
            devices = live_devices() if devices is None else devices
            wanted = "cuda:0" if stage_deploy.device == "cuda" else stage_deploy.device
            if wanted not in devices:
                raise DeploymentInvalid(f"{path}.device", f"no live worker has device {stage_deploy.device!r}")
    return deploy


@transaction.atomic
def deployment_create(*, name: str, pipeline: Pipeline, model_dir: str, deploy_config: dict, user=None) -> Deployment:
    if Deployment.objects.filter(name=name).exists():
        raise DeploymentInvalid("name", f"a deployment named {name!r} exists")
    deploy = validate_deploy_config(pipeline, deploy_config)
    try:
        checkpoint_check(pipeline.family, model_dir)
    except CheckpointInvalid as invalid:
        raise DeploymentInvalid("model_dir", invalid.message) from None
    deployment = Deployment.objects.create(
        name=name,
        pipeline=pipeline,
        model_dir=model_dir,
        deploy_config=_builtins(deploy),
        created_by=user,
    )
    DeploymentRevision.objects.create(
        deployment=deployment,
        number=1,
        config=deployment.deploy_config,
        state=RevisionState.ACTIVE,
        created_by=user,
        created_at=deployment.created_at,
        finished_at=deployment.created_at,
    )
    config = pipeline_config_of(pipeline)
    for stage in config.stages:
        if hosted_by(config, deploy, stage.name) == stage.name:
            ensure_replicas(deployment, config, deploy, stage.name, revision=1)
    return deployment


def hosted_by(pipeline: PipelineConfig, deploy: DeployConfig, stage: str) -> str:
    """The stage whose replica rows host `stage`: itself, or its group's entry (one row per group replica)."""
    group = StageGroups(pipeline, deploy).of(pipeline.stage_named(stage).id)
    return pipeline.stage(group.entry).name if group is not None else stage


def ensure_replicas(
    deployment: Deployment, pipeline: PipelineConfig, deploy: DeployConfig, stage: str, *, revision: int, **fields
) -> None:
    """Rows for every replica slot of `stage` that revision `revision` lacks."""
    stage_deploy: StageDeployConfig = deploy.for_stage(pipeline.stage_named(stage))
    existing = set(
        deployment.replicas.filter(stage=stage, revision=revision, retired=False).values_list("index", flat=True)
    )
    for index in range(stage_deploy.replicas):
        if index not in existing:
            replica_row_create(deployment, pipeline, deploy, stage, index, revision=revision, **fields)


def replica_row_create(
    deployment: Deployment, pipeline: PipelineConfig, deploy: DeployConfig, stage: str, index: int, *, revision: int,
    **fields,
) -> Replica:  # fmt: skip
    """The row of replica `index` of `stage` (a group's entry hosts the group) running `revision`'s config."""
    stage_config = pipeline.stage_named(stage)
    stage_deploy: StageDeployConfig = deploy.for_stage(stage_config)
    group = StageGroups(pipeline, deploy).of(stage_config.id)
    members = [pipeline.stage(member).name for member in group.members] if group is not None else []
    return Replica.objects.create(
        deployment=deployment,
        stage=stage,
        stage_id=stage_config.id,
        group=group.name if group is not None else "",
        members=members,
        index=index,
        pool=stage_deploy.pool,
        device=stage_deploy.device,
        revision=revision,
        **fields,
    )


@transaction.atomic
def deployment_scale(*, deployment: Deployment, stage: str, replicas: int, user=None) -> Deployment:
    """A change of one stage's replica count (a new revision that applies at once)."""
    from control_plane.deployments.revisions import deployment_change, effective_config  # built on this module

    config = pipeline_config_of(deployment.pipeline)
    try:
        stage_config = config.stage_named(stage)
    except KeyError:
        raise DeploymentInvalid("stage", f"no stage {stage!r} in {config.name}") from None
    if replicas < 1:
        raise DeploymentInvalid("replicas", "must be at least 1 (stop the deployment to remove every replica)")
    data = dict(deployment.deploy_config)
    stages = dict(data.get("stages", {}))
    current = load_deploy_config(data, config)
    group = StageGroups(config, current).of(stage_config.id)
    for member in [config.stage(sid).name for sid in group.members] if group is not None else [stage]:
        stages[member] = {**stages.get(member, {}), "replicas": replicas}  # a group scales as one
    data["stages"] = stages
    if effective_config(validate_deploy_config(deployment.pipeline, data), config) == effective_config(current, config):
        return deployment  # already that many
    deployment_change(deployment=deployment, deploy_config=data, user=user)
    deployment.refresh_from_db()
    return deployment


def apply_replica_counts(deployment: Deployment, pipeline: PipelineConfig, deploy: DeployConfig) -> None:
    """Rows for new slots, and the surplus drained (a change of replica counts only: no rollout)."""
    for stage in pipeline.stages:
        if hosted_by(pipeline, deploy, stage.name) != stage.name:
            continue
        ensure_replicas(deployment, pipeline, deploy, stage.name, revision=deployment.revision)
        wanted = deploy.for_stage(stage).replicas
        surplus = deployment.replicas.filter(stage=stage.name, index__gte=wanted, retired=False)
        for replica_id in surplus.values_list("pk", flat=True):
            transition_from_current(
                Replica,
                replica_id,
                DeploymentState.DRAINING,
                unless=[DeploymentState.STOPPED],
                state_reason="scaled down",
            )


def deployment_stop(*, deployment: Deployment) -> Deployment:
    Deployment.objects.filter(pk=deployment.pk).update(desired_state=Deployment.Desired.STOPPED)
    deployment.refresh_from_db()
    return deployment


def deployment_start(*, deployment: Deployment) -> Deployment:
    Deployment.objects.filter(pk=deployment.pk).update(desired_state=Deployment.Desired.RUNNING)
    deployment.refresh_from_db()
    return deployment


def deployment_delete(*, deployment: Deployment) -> None:
    for replica in deployment.replicas.exclude(state=DeploymentState.STOPPED):
        stop_replica(replica)
    deployment.delete()


def _builtins(deploy: DeployConfig) -> dict:
    return msgspec.to_builtins(deploy)
