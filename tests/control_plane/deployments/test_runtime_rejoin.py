"""A replica whose host was cut off and comes back: the reconciler failed it and scheduled it
again; when it is next seen ready (the old host beating again, or a new one that loaded between
two looks) it serves a running deployment at once, and a host still draining is waited out."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from reconciler_testing import state_of

from control_plane.deployments.models import Deployment, Pipeline, Replica
from control_plane.deployments.models import DeploymentState as S
from control_plane.deployments.reconciler import reconcile
from control_plane.deployments.services import deployment_create
from control_plane.deployments.transitions import transition_from_current

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_replica_back_from_a_partition_serves_the_running_deployment_at_once(settings, lifecycle):
    settings.REPLICA_BACKOFF_BASE_S = 1.0
    deployment = deployment_create(name="rejoin", pipeline=Pipeline.objects.get(name="echo"), model_dir="-",
                                   deploy_config={"stages": {"echo": {"replicas": 2}}})  # fmt: skip
    Replica.objects.filter(deployment=deployment).update(pool=lifecycle.pool)
    steady, returning = deployment.replicas.order_by("index")
    for replica in (steady, returning):
        transition_from_current(Replica, replica.pk, S.RUNNING)
    transition_from_current(Deployment, deployment.pk, S.RUNNING)
    lifecycle.beat(steady)
    now = timezone.now()

    reconcile(now=now)  # `returning` has no heartbeat: its host is cut off
    assert state_of(returning) == S.ERROR
    later = now + timedelta(seconds=1)
    reconcile(now=later)
    reconcile(now=later)
    assert state_of(returning) == S.SCHEDULED and state_of(deployment) == S.RUNNING

    lifecycle.beat(returning, state="DRAINING")  # told to stop while cut off: on its way out
    reconcile(now=later)
    assert state_of(returning) == S.SCHEDULED

    lifecycle.beat(returning, state="READY")
    reconcile(now=later)
    assert state_of(returning) == S.RUNNING  # not WARMING: the deployment warmed up long ago
