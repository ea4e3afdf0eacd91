"""Revisions and rollouts, the reconciler in-process (heartbeats written to the real Redis, an
injected clock): a change of a RUNNING deployment starts a replica of the new revision, retires
the old one only once the new one runs, and switches the deployment's config when no old replica
is left; a new replica that fails (or is not ready in time) fails the revision and the old
replica never stops; a rollback is a change to an earlier revision's config."""

from __future__ import annotations

from datetime import timedelta

import pytest
from reconciler_testing import state_of

from control_plane.deployments.config_diff import config_diff, merge_patch
from control_plane.deployments.models import Deployment, DeploymentRevision, Pipeline, Replica, RevisionState
from control_plane.deployments.models import DeploymentState as S
from control_plane.deployments.reconciler import reconcile, warmup_succeeded
from control_plane.deployments.replica_tasks import replica_spec
from control_plane.deployments.revisions import DeploymentBusy, deployment_change, deployment_rollback
from control_plane.deployments.services import DeploymentInvalid, deployment_create, deployment_scale

pytestmark = pytest.mark.django_db(transaction=True)
SHORT = {"max_tokens": 3}


@pytest.fixture
def pool(settings, lifecycle):
    """The test's private queue as a known pool, so that new revisions' replicas land there too."""
    settings.KNOWN_POOLS = [*settings.KNOWN_POOLS, lifecycle.pool]
    return lifecycle.pool


def echo_config(pool: str, **stage) -> dict:
    return {"stages": {"echo": {"pool": pool, "options": {"delay_s": 0.01}, **stage}}}


def running(lifecycle, pool: str, name: str) -> Deployment:
    """An echo deployment whose one replica came up and whose warm-up went through."""
    deployment = deployment_create(
        name=name, pipeline=Pipeline.objects.get(name="echo"), model_dir="-", deploy_config=echo_config(pool)
    )
    reconcile()
    lifecycle.beat(deployment.replicas.get(), "READY")
    reconcile()
    warmup_succeeded(deployment.id)
    assert state_of(deployment) == S.RUNNING
    return deployment


def live_rows(deployment) -> list[Replica]:
    return list(deployment.replicas.order_by("revision"))


def test_the_first_revision_is_made_at_create(lifecycle, pool):
    deployment = running(lifecycle, pool, "first")
    (revision,) = deployment.revisions.all()
    assert (revision.number, revision.state, revision.diff) == (1, RevisionState.ACTIVE, [])
    assert revision.config == deployment.deploy_config
    assert deployment.revision == 1 and deployment.replicas.get().revision == 1


def test_a_change_rolls_out_one_replica_at_a_time_and_switches_the_config_last(lifecycle, pool):
    deployment = running(lifecycle, pool, "rolling")
    old = deployment.replicas.get()

    revision = deployment_change(deployment=deployment, deploy_config=echo_config(pool, sampling=SHORT))
    assert (revision.number, revision.state) == (2, RevisionState.ROLLING)
    assert revision.diff == [{"path": "stages.echo.sampling.max_tokens", "old": None, "new": 3}]
    deployment.refresh_from_db()
    assert deployment.deploy_config["stages"]["echo"]["sampling"] == {}  # the serving path still reads revision 1
    with pytest.raises(DeploymentBusy):
        deployment_change(deployment=deployment, deploy_config=echo_config(pool))

    reconcile()  # a replica of revision 2 beside the old one
    new = deployment.replicas.get(revision=2)
    assert (new.stage, new.index, new.retired) == ("echo", 0, False)
    assert replica_spec(new).stage_deploy.sampling == SHORT  # it starts with the new config
    assert replica_spec(old).stage_deploy.sampling == {}
    reconcile()
    assert state_of(new) == S.SCHEDULED and state_of(old) == S.RUNNING

    lifecycle.beat(new, "LOADING")
    reconcile()
    assert state_of(new) == S.LOADING and state_of(old) == S.RUNNING  # not ready: the old one serves on
    lifecycle.beat(new, "READY")
    reconcile()  # the new one runs, so the old one drains
    assert state_of(new) == S.RUNNING
    assert state_of(old) == S.DRAINING and old.retired
    reconcile()
    assert lifecycle.tasks_sent()[-1] == "workers.stop_replica"
    assert state_of(deployment) == S.RUNNING

    lifecycle.beat(old, "DRAINING")
    reconcile()
    assert state_of(old) == S.DRAINING  # finishing what it holds
    lifecycle.silence(old)
    reconcile()  # it stopped: its row goes
    assert not Replica.objects.filter(pk=old.pk).exists()
    reconcile()
    revision.refresh_from_db()
    deployment.refresh_from_db()
    assert revision.state == RevisionState.ACTIVE and revision.finished_at is not None
    assert deployment.revision == 2 and deployment.deploy_config["stages"]["echo"]["sampling"] == SHORT
    assert deployment.revisions.get(number=1).state == RevisionState.SUPERSEDED
    assert [(r.revision, r.state) for r in live_rows(deployment)] == [(2, S.RUNNING)]


def test_a_new_replica_that_fails_fails_the_revision_and_the_old_one_serves_on(lifecycle, pool):
    deployment = running(lifecycle, pool, "broken")
    old = deployment.replicas.get()
    revision = deployment_change(deployment=deployment, deploy_config=echo_config(pool, sampling=SHORT))
    reconcile()
    new = deployment.replicas.get(revision=2)
    reconcile()
    lifecycle.beat(new, "ERROR", error="could not build the engine: boom")
    reconcile()  # the replica fails, and with it the revision
    revision.refresh_from_db()
    assert revision.state == RevisionState.FAILED
    assert "boom" in revision.state_reason
    assert state_of(new) == S.DRAINING and new.retired
    assert state_of(old) == S.RUNNING and not old.retired
    deployment.refresh_from_db()
    assert deployment.revision == 1 and deployment.deploy_config["stages"]["echo"]["sampling"] == {}
    assert state_of(deployment) == S.RUNNING

    lifecycle.silence(new)
    reconcile()
    reconcile()
    assert [(r.revision, r.state) for r in live_rows(deployment)] == [(1, S.RUNNING)]
    # a later change may go ahead
    assert deployment_change(deployment=deployment, deploy_config=echo_config(pool, sampling={"max_tokens": 5}))


def test_a_new_replica_not_ready_within_the_timeout_fails_the_revision(settings, lifecycle, pool):
    settings.ROLLOUT_READY_TIMEOUT_S = 60.0
    deployment = running(lifecycle, pool, "slow")
    old = deployment.replicas.get()
    revision = deployment_change(deployment=deployment, deploy_config=echo_config(pool, sampling=SHORT))
    reconcile()
    new = deployment.replicas.get(revision=2)
    revision.refresh_from_db()
    lifecycle.beat(old, "READY")
    lifecycle.beat(new, "LOADING")
    reconcile(now=revision.step_started_at + timedelta(seconds=30))
    revision.refresh_from_db()
    assert revision.state == RevisionState.ROLLING  # still within its time
    lifecycle.beat(old, "READY")
    lifecycle.beat(new, "LOADING")
    reconcile(now=revision.step_started_at + timedelta(seconds=90))
    revision.refresh_from_db()
    assert revision.state == RevisionState.FAILED
    assert "not ready within 60 s" in revision.state_reason
    assert state_of(new) == S.DRAINING and state_of(old) == S.RUNNING


def test_a_rollback_is_a_change_to_the_earlier_config(lifecycle, pool):
    deployment = deployment_create(
        name="back", pipeline=Pipeline.objects.get(name="echo"), model_dir="-", deploy_config=echo_config(pool)
    )
    first = deployment.replicas.get()
    # not RUNNING: nothing to keep serving, so a change applies at once
    second = deployment_change(deployment=deployment, deploy_config=echo_config(pool, sampling=SHORT))
    assert second.state == RevisionState.ACTIVE
    assert state_of(first) == S.DRAINING and first.retired
    assert deployment.replicas.get(retired=False).revision == 2

    third = deployment_rollback(deployment=deployment, number=1)
    assert (third.number, third.rollback_of, third.state) == (3, 1, RevisionState.ACTIVE)
    assert third.config == deployment.revisions.get(number=1).config
    assert third.diff == [{"path": "stages.echo.sampling.max_tokens", "old": 3, "new": None}]
    deployment.refresh_from_db()
    assert deployment.revision == 3 and deployment.deploy_config == third.config
    with pytest.raises(DeploymentInvalid) as missing:
        deployment_rollback(deployment=deployment, number=9)
    assert missing.value.field == "revision"
    with pytest.raises(DeploymentInvalid) as same:
        deployment_rollback(deployment=deployment, number=1)  # the config serving already
    assert same.value.field == "deploy_config"


def test_scaling_is_a_revision_that_applies_at_once(lifecycle, pool):
    deployment = running(lifecycle, pool, "scaled")
    deployment = deployment_scale(deployment=deployment, stage="echo", replicas=2)
    revision = deployment.revisions.get(number=2)
    assert revision.state == RevisionState.ACTIVE
    assert revision.diff == [{"path": "stages.echo.replicas", "old": 1, "new": 2}]
    assert sorted((r.index, r.revision) for r in deployment.replicas.all()) == [(0, 2), (1, 2)]
    reconcile()
    assert state_of(deployment) == S.RUNNING  # no rollout: the first replica never stopped
    assert not deployment.replicas.filter(retired=True).exists()


def test_groups_cannot_change_on_a_deployed_deployment(lifecycle, pool):
    deployment = deployment_create(
        name="grouping", pipeline=Pipeline.objects.get(name="echo-chain"), model_dir="-", deploy_config={}
    )
    with pytest.raises(DeploymentInvalid) as refused:
        deployment_change(
            deployment=deployment, deploy_config={"stages": {"echo": {"group": "g"}, "echo2": {"group": "g"}}}
        )
    assert refused.value.field == "deploy_config.stages.echo.group"
    assert DeploymentRevision.objects.filter(deployment=deployment).count() == 1


def test_diffs_and_merge_patches():
    assert config_diff({"a": {"b": 1, "c": [1]}}, {"a": {"b": 2, "c": [1]}, "d": True}) == [
        {"path": "a.b", "old": 1, "new": 2},
        {"path": "d", "old": None, "new": True},
    ]
    current = {"stages": {"echo": {"sampling": {"max_tokens": 3, "temperature": 0.5}, "replicas": 1}}}
    patched = merge_patch(current, {"stages": {"echo": {"sampling": {"max_tokens": None}, "replicas": 2}}})
    assert patched == {"stages": {"echo": {"sampling": {"temperature": 0.5}, "replicas": 2}}}
    assert current["stages"]["echo"]["replicas"] == 1  # not changed in place
