"""Desired state (replicas per stage, pool) vs observed state (heartbeats) -> lifecycle tasks.

Runs in the orchestrator loop (one leader at a time). Every change of a row is a
compare-and-swap transition, so a concurrent API call or a second reconciler never
overwrites a newer state. Replica lifecycle:

    PENDING -> SCHEDULED (start task sent) -> LOADING -> WARMING (engine ready)
            -> RUNNING (after the deployment's warm-up request went through every stage)
    any -> ERROR (host reported an error or stopped heart-beating) -> PENDING after backoff
    surplus or stopping -> DRAINING (stop task sent) -> STOPPED
    replaced by a rollout (retired) -> DRAINING -> STOPPED -> row deleted

A deployment whose config changed rolls out replica by replica (`rollout.py`), one step a tick.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from control_plane.deployments.heartbeats import live_pools, replica_statuses
from control_plane.deployments.models import Deployment, DeploymentState, Replica
from control_plane.deployments.replica_tasks import start_replica, stop_replica
from control_plane.deployments.rollout import rollout_step
from control_plane.deployments.services import pipeline_config_of
from control_plane.deployments.transitions import transition
from stages.config import load_deploy_config
from stages.protocol import ReplicaStatus

log = logging.getLogger(__name__)
S = DeploymentState
ACTIVE = (S.LOADING, S.WARMING, S.RUNNING)
RESEND_START_AFTER = timedelta(seconds=30)
NEVER = timedelta(days=365 * 100)
NOT_RETRIED = "not retried: the configuration cannot load (fix it, then stop and start the deployment)"


def backoff_s(restarts: int) -> float:
    """10 s, 20 s, 40 s … capped at 5 min (settings)."""
    return min(settings.REPLICA_BACKOFF_BASE_S * 2 ** max(restarts - 1, 0), settings.REPLICA_BACKOFF_MAX_S)


@dataclass
class ReconcileResult:
    warmups: list[Deployment] = field(default_factory=list)
    """Deployments whose every stage has a ready replica: the driver sends their warm-up request."""


def reconcile(now: datetime | None = None) -> ReconcileResult:
    now = now or timezone.now()
    result = ReconcileResult()
    pools = live_pools()
    for deployment in Deployment.objects.select_related("pipeline").prefetch_related("replicas"):
        try:
            _reconcile_deployment(deployment, now, pools)
        except Exception:  # one broken deployment must not stop the others
            log.exception("reconciling deployment %s failed", deployment.name)
    result.warmups = list(
        Deployment.objects.select_related("pipeline").filter(state=S.WARMING, desired_state=Deployment.Desired.RUNNING)
    )
    return result


def _reconcile_deployment(deployment: Deployment, now: datetime, pools: dict) -> bool:
    replicas = list(deployment.replicas.all())
    statuses = replica_statuses([str(r.id) for r in replicas])
    if deployment.desired_state == Deployment.Desired.STOPPED:
        rollout_step(deployment, replicas, now)  # fails a rollout under way
        _stop_deployment(deployment, replicas, statuses, now)
        return False
    if deployment.state == S.STOPPED:
        transition(Deployment, deployment.pk, [S.STOPPED], S.PENDING, at=now, state_reason="restarting")
        for replica in replicas:
            if replica.retired:
                replica.delete()
            else:
                transition(Replica, replica.pk, [S.STOPPED], S.PENDING, at=now, next_start_at=None)
        return False
    for replica in replicas:
        _reconcile_replica(deployment, replica, statuses.get(str(replica.id)), now, pools)
    rollout_step(deployment, list(Replica.objects.filter(deployment=deployment)), now)  # fresh, not prefetched
    return _update_deployment_state(deployment, now)


def _reconcile_replica(deployment, replica: Replica, status: ReplicaStatus | None, now, pools) -> None:
    state = replica.state
    if state == S.DRAINING:
        if status is None:
            transition(Replica, replica.pk, [S.DRAINING], S.STOPPED, at=now)
            if replica.retired or replica.index >= _desired_replicas(deployment, replica.stage):
                replica.delete()
        elif status.state not in ("DRAINING", "STOPPED"):
            stop_replica(replica)
        return
    if state == S.STOPPED:
        if replica.retired:
            replica.delete()
        else:
            transition(Replica, replica.pk, [S.STOPPED], S.PENDING, at=now, next_start_at=None)
        return
    if state == S.ERROR:
        if replica.next_start_at is None or replica.next_start_at <= now:
            transition(Replica, replica.pk, [S.ERROR], S.PENDING, at=now, state_reason="restarting after an error")
        return
    if state == S.PENDING:
        if replica.next_start_at and replica.next_start_at > now:
            return
        reason = "" if pools.get(replica.pool) else f"waiting for a worker of pool {replica.pool!r} (none is live)"
        if transition(Replica, replica.pk, [S.PENDING], S.SCHEDULED, at=now, state_reason=reason):
            start_replica(replica)
        return
    if status is not None and status.state == "ERROR":
        _fail(replica, status.error or "the replica host reported an error", now, permanent=status.permanent)
        return
    if state == S.SCHEDULED:
        _observe_scheduled(deployment, replica, status, now, pools)
        return
    if state in ACTIVE:
        if status is None:
            _fail(replica, "the replica host stopped heart-beating", now)
            return
        _observe_active(deployment, replica, status, now)


def _observe_scheduled(deployment, replica: Replica, status: ReplicaStatus | None, now, pools) -> None:
    if status is None:
        reason = "" if pools.get(replica.pool) else f"waiting for a worker of pool {replica.pool!r} (none is live)"
        if reason != replica.state_reason:
            Replica.objects.filter(pk=replica.pk, state=S.SCHEDULED).update(state_reason=reason)
        if replica.state_changed_at < now - RESEND_START_AFTER and pools.get(replica.pool):
            # the start task may have been lost (Redis restarted): starting is idempotent
            Replica.objects.filter(pk=replica.pk, state=S.SCHEDULED).update(state_changed_at=now)
            start_replica(replica)
        return
    if status.state == "LOADING":
        target = S.LOADING
    elif status.state == "READY":  # first seen ready: it loaded between two looks, or its host was cut off
        target = S.RUNNING if deployment.state == S.RUNNING else S.WARMING
    else:
        return  # a host on its way out (told to drain while cut off): once it is gone, it is started again
    transition(Replica, replica.pk, [S.SCHEDULED], target, at=now, **_observed(status, now), state_reason="")


def _observe_active(deployment, replica: Replica, status: ReplicaStatus, now) -> None:
    fields = _observed(status, now)
    if replica.state == S.LOADING and status.state == "READY":
        target = S.RUNNING if deployment.state == S.RUNNING else S.WARMING
        transition(Replica, replica.pk, [S.LOADING], target, at=now, **fields)
        return
    if replica.state == S.WARMING and status.state == "READY" and deployment.state == S.RUNNING:
        # a replica added to a serving deployment (scale, rollout) that was READY when first seen
        transition(Replica, replica.pk, [S.WARMING], S.RUNNING, at=now, **fields)
        return
    Replica.objects.filter(pk=replica.pk, state=replica.state).update(**fields)


def _observed(status: ReplicaStatus, now) -> dict:
    return {
        "host": status.host,
        "progress": status.progress,
        "weights_loaded_bytes": status.weights_loaded_bytes,
        "weights_total_bytes": status.weights_total_bytes,
        "queue_depth": status.queue_depth,
        "transfers": status.transfers,
        "last_heartbeat": now,
    }


def _fail(replica: Replica, error: str, now, permanent: bool = False) -> None:
    restarts = replica.restarts + 1
    delay = backoff_s(restarts)
    if permanent:  # restarted only when the deployment is stopped and started again
        reason, next_start_at = NOT_RETRIED, now + NEVER
    else:
        reason, next_start_at = f"restarting in {delay:.0f} s", now + timedelta(seconds=delay)
    moved = transition(
        Replica,
        replica.pk,
        [replica.state],
        S.ERROR,
        at=now,
        restarts=restarts,
        last_error=error[:4000],
        state_reason=reason,
        next_start_at=next_start_at,
    )
    if moved:
        log.warning("replica %s failed (%s); %s", replica, error, reason)
        stop_replica(replica)


def _desired_replicas(deployment: Deployment, stage: str) -> int:
    stage_config = pipeline_config_of(deployment.pipeline).stage_named(stage)
    return load_deploy_config(deployment.deploy_config).for_stage(stage_config).replicas


def _stop_deployment(deployment: Deployment, replicas: list[Replica], statuses: dict, now: datetime) -> None:
    for replica in replicas:
        if replica.state == S.STOPPED:
            continue
        if replica.state != S.DRAINING:
            if transition(Replica, replica.pk, [replica.state], S.DRAINING, at=now, state_reason="deployment stopping"):
                stop_replica(replica)
        elif str(replica.id) not in statuses:
            transition(Replica, replica.pk, [S.DRAINING], S.STOPPED, at=now, state_reason="")
    all_stopped = not deployment.replicas.exclude(state=S.STOPPED).exists()
    target = S.STOPPED if all_stopped else S.DRAINING
    if deployment.state != target:
        transition(Deployment, deployment.pk, [deployment.state], target, at=now, state_reason="stopped by request")


def _update_deployment_state(deployment: Deployment, now: datetime) -> bool:
    """Derive the deployment's state from its replicas; True when it needs a warm-up request."""
    pipeline = pipeline_config_of(deployment.pipeline)
    replicas = list(deployment.replicas.exclude(state__in=[S.DRAINING, S.STOPPED]))
    by_stage = {
        stage.name: [r for r in replicas if r.stage == stage.name or stage.name in r.members]
        for stage in pipeline.stages
    }
    serving = {S.WARMING, S.RUNNING}
    every_stage_ready = all(any(r.state in serving for r in group) for group in by_stage.values())
    current = deployment.state
    if every_stage_ready:
        if current == S.RUNNING:
            return False
        if current == S.WARMING:
            return False  # warm-up in flight; the driver ends it
        if current == S.ERROR and deployment.warmup_attempts:
            retry_at = deployment.state_changed_at + timedelta(seconds=backoff_s(deployment.warmup_attempts))
            if now < retry_at:
                return False
        return transition(
            Deployment, deployment.pk, [current], S.WARMING, at=now, state_reason="warm-up request in flight"
        )
    errors = [r for r in replicas if r.state == S.ERROR]
    if any(r.state == S.LOADING for r in replicas):
        target, reason = S.LOADING, "loading models"
    elif errors:
        target, reason = S.ERROR, _failure_reason(errors[0])[:2000]
    else:
        reasons = sorted({r.state_reason for r in replicas if r.state_reason})
        target, reason = S.SCHEDULED, "; ".join(reasons)
    if current != target or deployment.state_reason != reason:
        transition(Deployment, deployment.pk, [current], target, at=now, state_reason=reason)
    return False


def _failure_reason(replica: Replica) -> str:
    """ "failed, retrying in N s (attempt K)" while the backoff runs; "not retried" for a permanent error."""
    if replica.state_reason == NOT_RETRIED:
        return f"{replica.stage} replica failed, {NOT_RETRIED}: {replica.last_error}"
    start = replica.next_start_at
    wait = (start - replica.state_changed_at).total_seconds() if start and replica.state_changed_at else 0.0
    return (  # the backoff as decided when it failed: a reason that does not change every tick
        f"{replica.stage} replica failed, retrying in {max(wait, 0):.0f} s (attempt {replica.restarts + 1}): "
        f"{replica.last_error}"
    )


def warmup_succeeded(deployment_id) -> None:
    """The deployment and its warming replicas RUNNING in one transaction: no reader sees a running
    deployment whose replicas still warm up."""
    with transaction.atomic():
        if transition(Deployment, deployment_id, [S.WARMING], S.RUNNING, state_reason="", warmup_attempts=0):
            warming = Replica.objects.filter(deployment_id=deployment_id, state=S.WARMING).values_list("pk", flat=True)
            for replica_id in warming:
                transition(Replica, replica_id, [S.WARMING], S.RUNNING)


def warmup_failed(deployment_id, message: str) -> None:
    from django.db.models import F

    transition(
        Deployment,
        deployment_id,
        [S.WARMING],
        S.ERROR,
        state_reason=f"warm-up failed: {message}"[:2000],
        warmup_attempts=F("warmup_attempts") + 1,
    )
