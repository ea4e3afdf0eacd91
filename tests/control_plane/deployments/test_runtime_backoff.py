"""Restart backoff of failed replicas: 10 s doubling to 5 min (settings), and a reconciler
that keeps a failed replica down until its backoff elapsed (driven by an injected clock)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from reconciler_testing import state_of

from control_plane.deployments.models import DeploymentState as S
from control_plane.deployments.models import Replica
from control_plane.deployments.reconciler import backoff_s, reconcile
from control_plane.deployments.transitions import transition_from_current

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_default_backoff_doubles_from_10_s_to_a_5_min_cap(settings):
    settings.REPLICA_BACKOFF_BASE_S, settings.REPLICA_BACKOFF_MAX_S = 10.0, 300.0
    assert [backoff_s(restarts) for restarts in range(1, 9)] == [10, 20, 40, 80, 160, 300, 300, 300]
    assert backoff_s(0) == 10


def test_the_backoff_follows_its_settings(settings):
    settings.REPLICA_BACKOFF_BASE_S, settings.REPLICA_BACKOFF_MAX_S = 0.5, 3.0
    assert [backoff_s(restarts) for restarts in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


def fail_while_running(replica: Replica, now) -> None:
    """The replica serves, then its host stops heart-beating: the reconciler fails it at `now`."""
    transition_from_current(Replica, replica.pk, S.RUNNING)
    reconcile(now=now)
    assert state_of(replica) == S.ERROR


def test_a_failed_replica_restarts_only_after_its_backoff_which_doubles(settings, lifecycle):
    settings.REPLICA_BACKOFF_BASE_S, settings.REPLICA_BACKOFF_MAX_S = 10.0, 300.0
    replica = lifecycle.deploy("backoff").replicas.get()
    failed_at = timezone.now()

    fail_while_running(replica, failed_at)
    assert replica.restarts == 1 and replica.next_start_at == failed_at + seconds(10)
    assert "stopped heart-beating" in replica.last_error
    assert lifecycle.tasks_sent() == ["workers.stop_replica"]

    reconcile(now=failed_at + seconds(9.9))
    assert state_of(replica) == S.ERROR and lifecycle.tasks_sent() == ["workers.stop_replica"]

    reconcile(now=failed_at + seconds(10))
    reconcile(now=failed_at + seconds(10))
    assert state_of(replica) == S.SCHEDULED
    assert lifecycle.tasks_sent() == ["workers.stop_replica", "workers.start_replica"]
    assert "stopped heart-beating" in replica.last_error  # the error stays on the row

    failed_again = failed_at + seconds(60)
    fail_while_running(replica, failed_again)
    assert replica.restarts == 2 and replica.next_start_at == failed_again + seconds(20)
    reconcile(now=failed_again + seconds(19.9))
    assert state_of(replica) == S.ERROR
    reconcile(now=failed_again + seconds(20))
    reconcile(now=failed_again + seconds(20))
    assert state_of(replica) == S.SCHEDULED
    assert lifecycle.tasks_sent()[-1] == "workers.start_replica"


def test_an_error_the_host_reports_is_kept_and_backs_off_from_the_settings(settings, lifecycle):
    settings.REPLICA_BACKOFF_BASE_S, settings.REPLICA_BACKOFF_MAX_S = 2.0, 3.0
    replica = lifecycle.deploy("reported").replicas.get()
    transition_from_current(Replica, replica.pk, S.LOADING)
    lifecycle.beat(replica, "ERROR", error="loading failed: OSError: no checkpoint")
    now = timezone.now()

    reconcile(now=now)
    assert state_of(replica) == S.ERROR and replica.last_error == "loading failed: OSError: no checkpoint"
    assert replica.next_start_at == now + seconds(2) and replica.state_reason == "restarting in 2 s"
    lifecycle.silence(replica)
    reconcile(now=now + seconds(1.9))
    assert state_of(replica) == S.ERROR
    reconcile(now=now + seconds(2))
    assert state_of(replica) == S.PENDING


def test_a_configuration_error_is_not_retried_until_the_deployment_restarts(settings, lifecycle):
    settings.REPLICA_BACKOFF_BASE_S, settings.REPLICA_BACKOFF_MAX_S = 2.0, 3.0
    deployment = lifecycle.deploy("misconfigured")
    replica = deployment.replicas.get()
    transition_from_current(Replica, replica.pk, S.LOADING)
    lifecycle.beat(replica, "ERROR", error="loading failed: ConfigError: model: no config.json", permanent=True)
    now = timezone.now()

    reconcile(now=now)
    lifecycle.silence(replica)
    for later in (60, 3600, 86400 * 30):
        reconcile(now=now + seconds(later))
        assert state_of(replica) == S.ERROR
    assert replica.state_reason.startswith("not retried")
    deployment.refresh_from_db()
    assert deployment.state == S.ERROR and "not retried" in deployment.state_reason
    assert "no config.json" in deployment.state_reason


def test_a_failing_deployment_says_when_it_retries_and_which_attempt(settings, lifecycle):
    settings.REPLICA_BACKOFF_BASE_S, settings.REPLICA_BACKOFF_MAX_S = 20.0, 300.0
    deployment = lifecycle.deploy("flaky")
    replica = deployment.replicas.get()
    transition_from_current(Replica, replica.pk, S.LOADING)
    lifecycle.beat(replica, "ERROR", error="loading failed: RuntimeError: CUDA out of memory")
    reconcile(now=timezone.now())
    reconcile(now=timezone.now())
    deployment.refresh_from_db()
    assert deployment.state == S.ERROR
    assert deployment.state_reason.startswith("echo replica failed, retrying in 20 s (attempt 2)"), (
        deployment.state_reason
    )
