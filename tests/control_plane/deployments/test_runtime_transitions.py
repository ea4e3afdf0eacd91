"""State changes are compare-and-swap: of two writers racing from one state exactly one wins,
and a writer that must move a row from whatever state it is in never loses another's update."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from reconciler_testing import state_of

from control_plane.deployments.models import Deployment, Replica
from control_plane.deployments.models import DeploymentState as S
from control_plane.deployments.services import deployment_scale
from control_plane.deployments.transitions import transition, transition_from_current

pytestmark = pytest.mark.django_db(transaction=True)
ROUNDS = 12


def race(*writers) -> list:
    """Run the writers at once (each on its own thread and database connection)."""
    barrier = threading.Barrier(len(writers))
    results: list = [None] * len(writers)

    def run(index, writer):
        try:
            barrier.wait(timeout=30)
            results[index] = writer()
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, w)) for i, w in enumerate(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def test_two_transitions_racing_from_one_state_exactly_one_wins(lifecycle):
    replica = lifecycle.deploy("race").replicas.get()
    for _ in range(ROUNDS):
        transition_from_current(Replica, replica.pk, S.RUNNING)
        failed, drained = race(
            lambda: transition(Replica, replica.pk, [S.RUNNING], S.ERROR, last_error="lost its host"),
            lambda: transition(Replica, replica.pk, [S.RUNNING], S.DRAINING, state_reason="scaled down"),
        )
        assert [failed, drained].count(True) == 1
        assert state_of(replica) == (S.ERROR if failed else S.DRAINING)


def test_two_deployment_transitions_racing_exactly_one_wins(lifecycle):
    deployment = lifecycle.deploy("race-deployment")
    for _ in range(ROUNDS):
        transition_from_current(Deployment, deployment.pk, S.WARMING)
        succeeded, failed = race(
            lambda: transition(Deployment, deployment.pk, [S.WARMING], S.RUNNING),
            lambda: transition(Deployment, deployment.pk, [S.WARMING], S.ERROR, state_reason="warm-up failed"),
        )
        assert [succeeded, failed].count(True) == 1
        assert state_of(deployment) == (S.RUNNING if succeeded else S.ERROR)


def test_draining_from_the_current_state_never_loses_a_concurrent_failure(lifecycle):
    replica = lifecycle.deploy("drain-race").replicas.get()
    for round_ in range(ROUNDS):
        transition_from_current(Replica, replica.pk, S.RUNNING, last_error="")
        failed, _ = race(
            lambda round_=round_: transition(Replica, replica.pk, [S.RUNNING], S.ERROR, last_error=f"died {round_}"),
            lambda: transition_from_current(Replica, replica.pk, S.DRAINING, unless=[S.STOPPED]),
        )
        assert state_of(replica) == S.DRAINING  # whichever came first, the drain holds
        assert replica.last_error == (f"died {round_}" if failed else "")  # and a failure that won is kept


def test_scaling_down_drains_surplus_replicas_through_compare_and_swap(lifecycle):
    deployment = lifecycle.deploy("scale", pipeline="echo-chain")
    deployment = deployment_scale(deployment=deployment, stage="echo2", replicas=4)
    surplus = {r.index: r for r in deployment.replicas.filter(stage="echo2")}
    transition_from_current(Replica, surplus[1].pk, S.RUNNING)
    transition_from_current(Replica, surplus[2].pk, S.ERROR)
    transition_from_current(Replica, surplus[3].pk, S.STOPPED)

    deployment_scale(deployment=deployment, stage="echo2", replicas=1)

    assert [state_of(surplus[index]) for index in range(4)] == [S.PENDING, S.DRAINING, S.DRAINING, S.STOPPED]
    assert surplus[1].state_reason == "scaled down"
