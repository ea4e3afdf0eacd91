"""The reconciler's rollout step: bring a deployment's replicas to one revision, one replica at a time.

The target is the revision rolling out, else the one serving (which also repairs what a failed
rollout left: slots whose old replica was already replaced get one of the serving revision again).
Per replica slot (stage, index) of the target's config, in order:

1. no replica of the target's revision in the slot: create one (it loads, then warms up to READY);
2. while it is not RUNNING, wait; if it goes to ERROR, or is not RUNNING within
   ROLLOUT_READY_TIMEOUT_S, the rollout fails: the revision is FAILED, its replicas that are
   not serving are retired, the old ones never stopped serving;
3. once it runs, retire the slot's replica of another revision: it drains (takes no new
   requests, finishes its own), stops, and its row goes; the next slot waits for that.

Then replicas of other revisions in slots the target does not have are retired one by one; when
none is left the revision is ACTIVE and `deploy_config` is its config.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from control_plane.deployments.models import Deployment, DeploymentRevision, DeploymentState, Replica
from control_plane.deployments.revisions import (
    replica_retire,
    revision_activate,
    revision_fail,
    rolling_revision,
)
from control_plane.deployments.services import hosted_by, pipeline_config_of, replica_row_create
from stages.config import load_deploy_config

S = DeploymentState


def ready_timeout_s() -> float:
    return float(getattr(settings, "ROLLOUT_READY_TIMEOUT_S", 600.0))


def rollout_step(deployment: Deployment, replicas: list[Replica], now: datetime) -> None:
    """One step toward the target revision (at most one replica created or retired per call)."""
    rolling = rolling_revision(deployment)
    if deployment.desired_state != Deployment.Desired.RUNNING:
        if rolling is not None:
            _fail(deployment, rolling, replicas, "the deployment was stopped during the rollout")
        return
    number = rolling.number if rolling is not None else deployment.revision
    config = rolling.config if rolling is not None else deployment.deploy_config
    live = [r for r in replicas if not r.retired]
    target = [r for r in live if r.revision == number]
    others = [r for r in live if r.revision != number]
    if rolling is not None and _failed(deployment, rolling, target, replicas, now):
        return
    if not others and rolling is None:
        return  # converged: scaling and restarts are the reconciler's own work
    if any(not _serving(r) for r in target) or any(r.retired for r in replicas):
        return  # a new replica is not ready yet, or a replaced one still drains
    pipeline = pipeline_config_of(deployment.pipeline)
    deploy = load_deploy_config(config or {}, pipeline)
    slots = [
        (stage.name, index)
        for stage in pipeline.stages
        if hosted_by(pipeline, deploy, stage.name) == stage.name
        for index in range(deploy.for_stage(stage).replicas)
    ]
    for stage, index in slots:
        if not any(r.stage == stage and r.index == index for r in target):
            with transaction.atomic():
                replica_row_create(deployment, pipeline, deploy, stage, index, revision=number)
                if rolling is not None:
                    DeploymentRevision.objects.filter(pk=rolling.pk).update(step_started_at=now)
            return
        replaced = [r for r in others if r.stage == stage and r.index == index]
        if replaced:
            replica_retire(replaced[0], f"replaced by revision {number}")
            return
    if others:
        replica_retire(others[0], f"not in revision {number}")
        return
    if rolling is not None:
        with transaction.atomic():
            revision_activate(deployment, rolling)


def _serving(replica: Replica) -> bool:
    return replica.state == S.RUNNING


def _failed(deployment, rolling: DeploymentRevision, target: list[Replica], replicas, now: datetime) -> bool:
    broken = [r for r in target if r.state == S.ERROR or r.restarts > 0]
    if broken:
        replica = broken[0]
        reason = f"{replica.label} replica #{replica.index} failed: {replica.last_error or replica.state_reason}"
        _fail(deployment, rolling, replicas, reason)
        return True
    waiting = [r for r in target if not _serving(r)]
    started = rolling.step_started_at or rolling.created_at
    if waiting and now - started > timedelta(seconds=ready_timeout_s()):
        replica = waiting[0]
        reason = (
            f"{replica.label} replica #{replica.index} was not ready within {ready_timeout_s():g} s ({replica.state})"
        )
        _fail(deployment, rolling, replicas, reason)
        return True
    return False


def _fail(deployment, rolling: DeploymentRevision, replicas: list[Replica], reason: str) -> None:
    """The revision failed: its replicas that do not serve go; the serving revision takes back the
    slots it lost (the next steps, with the serving revision as the target)."""
    if not revision_fail(rolling, reason):
        return
    for replica in replicas:
        if replica.revision == rolling.number and not replica.retired and not _serving(replica):
            replica_retire(replica, f"revision {rolling.number} failed")
