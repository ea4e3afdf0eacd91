"""Changing a deployment's DeployConfig: each change is a new revision (number, author, time, the
whole config, its diff against the previous revision).

A change of replica counts only applies at once (rows added, the surplus drained). Any other change
of a RUNNING deployment rolls out replica by replica (`rollout.py`, run by the reconciler): the
revision is ROLLING until every replica runs its config, then ACTIVE; `deploy_config` (what the
serving path reads: sampling, limits) switches when it is. A deployment that is not RUNNING has
nothing to keep serving: its replicas are replaced at once. A rollback is a change to an earlier
revision's config."""

from __future__ import annotations

import msgspec
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from control_plane.deployments.checkpoint_check import CheckpointInvalid, checkpoint_check
from control_plane.deployments.config_diff import config_diff
from control_plane.deployments.models import Deployment, DeploymentRevision, DeploymentState, Replica, RevisionState
from control_plane.deployments.replica_tasks import stop_replica
from control_plane.deployments.services import (
    DeploymentInvalid,
    apply_replica_counts,
    ensure_replicas,
    hosted_by,
    pipeline_config_of,
    validate_deploy_config,
)
from control_plane.deployments.transitions import transition_from_current
from stages.config import DeployConfig, PipelineConfig, StageDeployConfig, load_deploy_config
from stages.groups import StageGroups


class DeploymentBusy(Exception):
    """A change while an earlier one still rolls out."""


def revision_of(deployment: Deployment, number: int) -> DeploymentRevision | None:
    return deployment.revisions.filter(number=number).first()


def rolling_revision(deployment: Deployment) -> DeploymentRevision | None:
    return deployment.revisions.filter(state=RevisionState.ROLLING).order_by("number").first()


@transaction.atomic
def deployment_change(
    *, deployment: Deployment, deploy_config: dict, user=None, rollback_of: int | None = None
) -> DeploymentRevision:
    """Validate `deploy_config` as create does and record it as the next revision; see the module."""
    deployment = Deployment.objects.select_for_update().select_related("pipeline").get(pk=deployment.pk)
    rolling = rolling_revision(deployment)
    if rolling is not None:
        raise DeploymentBusy(f"revision {rolling.number} of {deployment.name} is still rolling out")
    if not isinstance(deploy_config, dict):
        raise DeploymentInvalid("deploy_config", "must be a JSON object")
    deploy = validate_deploy_config(deployment.pipeline, deploy_config)
    try:
        checkpoint_check(deployment.pipeline.family, deployment.model_dir)
    except CheckpointInvalid as invalid:
        raise DeploymentInvalid("model_dir", invalid.message) from None
    pipeline = pipeline_config_of(deployment.pipeline)
    current = load_deploy_config(deployment.deploy_config or {}, pipeline)
    _check_groups_unchanged(pipeline, current, deploy)
    new_config = msgspec.to_builtins(deploy)
    diff = config_diff(effective_config(current, pipeline), effective_config(deploy, pipeline))
    if not diff:
        raise DeploymentInvalid("deploy_config", f"no change: revision {deployment.revision} has this config")
    number = (deployment.revisions.aggregate(top=Max("number"))["top"] or 0) + 1
    revision = DeploymentRevision.objects.create(
        deployment=deployment,
        number=number,
        config=new_config,
        diff=diff,
        created_by=user,
        rollback_of=rollback_of,
        state=RevisionState.ROLLING,
    )
    if all(change["path"].endswith(".replicas") for change in diff):
        _apply_now(deployment, revision, pipeline, deploy, replace=False)
    elif deployment.state != DeploymentState.RUNNING or deployment.desired_state != Deployment.Desired.RUNNING:
        _apply_now(deployment, revision, pipeline, deploy, replace=True)
    else:
        revision.step_started_at = timezone.now()
        revision.save(update_fields=["step_started_at"])
    revision.refresh_from_db()
    return revision


def effective_config(deploy: DeployConfig, pipeline: PipelineConfig) -> dict:
    """The config with every stage of the pipeline spelled out (a stage left out has the defaults),
    so that a diff shows what changed and not how it was written."""
    stages = {stage.name: deploy.stages.get(stage.name) or StageDeployConfig() for stage in pipeline.stages}
    return msgspec.to_builtins(msgspec.structs.replace(deploy, stages=stages))


def deployment_rollback(*, deployment: Deployment, number: int, user=None) -> DeploymentRevision:
    """A change back to revision `number`'s config."""
    earlier = revision_of(deployment, number)
    if earlier is None:
        raise DeploymentInvalid("revision", f"{deployment.name} has no revision {number}")
    return deployment_change(deployment=deployment, deploy_config=earlier.config, user=user, rollback_of=number)


def revision_activate(deployment: Deployment, revision: DeploymentRevision) -> None:
    """`revision` serves: the deployment's config is its config, the one that served before is superseded."""
    now = timezone.now()
    deployment.revisions.filter(state=RevisionState.ACTIVE).exclude(pk=revision.pk).update(
        state=RevisionState.SUPERSEDED
    )
    DeploymentRevision.objects.filter(pk=revision.pk).update(state=RevisionState.ACTIVE, finished_at=now)
    deployment.deploy_config = revision.config
    deployment.revision = revision.number
    deployment.save(update_fields=["deploy_config", "revision"])  # post_save: served caches drop it


def revision_fail(revision: DeploymentRevision, reason: str) -> bool:
    """Mark a rollout failed; True when this call did (a concurrent reconciler may have)."""
    return bool(
        DeploymentRevision.objects.filter(pk=revision.pk, state=RevisionState.ROLLING).update(
            state=RevisionState.FAILED, state_reason=reason[:2000], finished_at=timezone.now()
        )
    )


def replica_retire(replica: Replica, why: str) -> None:
    """Take a replica out: it drains (no new requests, finishes its own), stops and its row goes."""
    Replica.objects.filter(pk=replica.pk).update(retired=True)
    moved = transition_from_current(
        Replica,
        replica.pk,
        DeploymentState.DRAINING,
        unless=[DeploymentState.DRAINING, DeploymentState.STOPPED],
        state_reason=why,
    )
    if moved:
        stop_replica(replica)


def _apply_now(deployment, revision, pipeline: PipelineConfig, deploy: DeployConfig, *, replace: bool) -> None:
    revision_activate(deployment, revision)
    if not replace:
        deployment.replicas.filter(retired=False).update(revision=revision.number)
        apply_replica_counts(deployment, pipeline, deploy)
        return
    stopped = deployment.desired_state == Deployment.Desired.STOPPED
    for replica in deployment.replicas.exclude(revision=revision.number):
        if replica.state == DeploymentState.STOPPED:
            replica.delete()
        else:
            replica_retire(replica, f"replaced by revision {revision.number}")
    for stage in pipeline.stages:
        if hosted_by(pipeline, deploy, stage.name) == stage.name:
            extra = {"state": DeploymentState.STOPPED} if stopped else {}
            ensure_replicas(deployment, pipeline, deploy, stage.name, revision=revision.number, **extra)


def _check_groups_unchanged(pipeline: PipelineConfig, current: DeployConfig, new: DeployConfig) -> None:
    before, after = StageGroups(pipeline, current), StageGroups(pipeline, new)
    for stage in pipeline.stages:
        was, now = before.of(stage.id), after.of(stage.id)
        if (was and (was.name, was.members)) != (now and (now.name, now.members)):
            raise DeploymentInvalid(
                f"deploy_config.stages.{stage.name}.group",
                "stage groups cannot change on a deployed deployment (create a new deployment)",
            )
