"""Warm-up gating: a deployment is RUNNING only after its warm-up request went through every
stage; a failed warm-up moves it to ERROR with the reason and is retried after a backoff.

The reconciler in-process (injected clock, heartbeats written to the real Redis), then the
whole platform with an echo stage that fails its first warm-ups."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from reconciler_testing import state_of

from control_plane.deployments.models import Deployment
from control_plane.deployments.models import DeploymentState as S
from control_plane.deployments.reconciler import reconcile, warmup_failed, warmup_succeeded

pytestmark = pytest.mark.django_db(transaction=True)


def ready_and_warming(lifecycle, name: str) -> Deployment:
    """A two-stage deployment whose replicas all came up: its warm-up is due."""
    deployment = lifecycle.deploy(name, pipeline="echo-chain")
    reconcile()
    for replica in deployment.replicas.all():
        lifecycle.beat(replica, "READY")
    result = reconcile()
    assert [str(d.id) for d in result.warmups] == [str(deployment.id)]
    return deployment


def test_every_stage_ready_is_not_enough_the_warmup_must_succeed(lifecycle):
    deployment = lifecycle.deploy("gated", pipeline="echo-chain")
    reconcile()
    first, second = deployment.replicas.order_by("stage_id")
    lifecycle.beat(first, "READY")
    assert reconcile().warmups == []  # one stage is not a pipeline
    assert state_of(deployment) != S.WARMING

    lifecycle.beat(second, "READY")
    assert [d.name for d in reconcile().warmups] == ["gated"]
    assert state_of(deployment) == S.WARMING
    later = reconcile(now=deployment.state_changed_at + timedelta(minutes=10))
    assert [d.name for d in later.warmups] == ["gated"]  # still waiting for the result, however long
    assert state_of(deployment) == S.WARMING
    assert {r.state for r in deployment.replicas.all()} == {S.WARMING}

    warmup_succeeded(deployment.id)
    assert state_of(deployment) == S.RUNNING and deployment.state_reason == ""
    assert {r.state for r in deployment.replicas.all()} == {S.RUNNING}
    assert reconcile().warmups == []


def test_a_failed_warmup_is_an_error_with_its_reason_retried_after_a_backoff(settings, lifecycle):
    settings.REPLICA_BACKOFF_BASE_S, settings.REPLICA_BACKOFF_MAX_S = 10.0, 300.0
    deployment = ready_and_warming(lifecycle, "flaky")

    warmup_failed(deployment.id, "stage 'echo2': out of memory")
    assert state_of(deployment) == S.ERROR
    assert deployment.state_reason == "warm-up failed: stage 'echo2': out of memory"
    assert deployment.warmup_attempts == 1
    failed_at = deployment.state_changed_at

    assert reconcile(now=failed_at + timedelta(seconds=9.9)).warmups == []
    assert state_of(deployment) == S.ERROR and "out of memory" in deployment.state_reason
    assert {r.state for r in deployment.replicas.all()} == {S.WARMING}  # the replicas are fine

    assert [d.name for d in reconcile(now=failed_at + timedelta(seconds=10)).warmups] == ["flaky"]
    assert state_of(deployment) == S.WARMING

    warmup_failed(deployment.id, "again")
    assert state_of(deployment) == S.ERROR and deployment.warmup_attempts == 2
    failed_again = deployment.state_changed_at
    assert reconcile(now=failed_again + timedelta(seconds=19.9)).warmups == []
    assert [d.name for d in reconcile(now=failed_again + timedelta(seconds=20)).warmups] == ["flaky"]

    warmup_succeeded(deployment.id)
    assert state_of(deployment) == S.RUNNING and deployment.warmup_attempts == 0


def test_a_late_warmup_result_cannot_undo_a_newer_state(lifecycle):
    deployment = ready_and_warming(lifecycle, "late")
    warmup_failed(deployment.id, "timed out")
    warmup_succeeded(deployment.id)  # the result of an earlier attempt, arriving after the failure
    assert state_of(deployment) == S.ERROR and deployment.state_reason == "warm-up failed: timed out"


# ---------------------------------------------------------------------------- live


def watch_states(stack, name: str, until: str, timeout: float = 120) -> list[dict]:
    """Poll the deployment until it reaches `until`; every distinct (state, reason) seen, in order."""
    seen: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = stack.api("GET", f"/api/deployments/{name}/").json()
        if not seen or (seen[-1]["state"], seen[-1]["state_reason"]) != (body["state"], body["state_reason"]):
            seen.append(body)
        if body["state"] == until:
            return seen
        time.sleep(0.1)
    print(stack.logs())
    raise AssertionError(f"{name} never became {until}; states seen: {[b['state'] for b in seen]}")


@pytest.mark.slow
def test_live_a_warmup_failing_in_the_last_stage_holds_the_deployment_back_until_a_retry_passes(stack):
    config = {"stages": {"echo2": {"options": {"fail_warmups": 2}}}}
    stack.deploy("warm-chain", "echo-chain", deploy_config=config)

    seen = watch_states(stack, "warm-chain", until="RUNNING")

    errors = [body for body in seen if body["state"] == "ERROR"]
    assert errors, [body["state"] for body in seen]
    reason = errors[0]["state_reason"]
    assert reason.startswith("warm-up failed:") and "echo2" in reason and "fails its warm-up on purpose" in reason
    # the first stage served the warm-up, the second failed it; no replica was restarted for it
    assert all(r["state"] == "WARMING" and r["restarts"] == 0 for r in errors[0]["replicas"])
    states = [body["state"] for body in seen]
    assert "RUNNING" not in states[:-1]  # never RUNNING before a warm-up passed, after the failures
    running = seen[-1]
    assert running["state_reason"] == "" and {r["state"] for r in running["replicas"]} == {"RUNNING"}
    assert Deployment.objects.get(name="warm-chain").warmup_attempts == 0


@pytest.mark.slow
def test_live_a_warmup_that_keeps_failing_stays_in_error_and_is_retried(stack):
    stack.deploy("warm-never", "echo-chain", deploy_config={"stages": {"echo2": {"options": {"fail_warmups": 1000}}}})
    stack.wait_state("warm-never", "ERROR")

    def attempts() -> int:
        return Deployment.objects.get(name="warm-never").warmup_attempts

    from procs import wait_for

    wait_for(lambda: attempts() >= 2, timeout=60, interval=0.3, what="a second warm-up attempt")
    body = stack.api("GET", "/api/deployments/warm-never/").json()
    assert body["state"] in ("ERROR", "WARMING")
    assert body["state"] == "WARMING" or "fails its warm-up on purpose" in body["state_reason"]
