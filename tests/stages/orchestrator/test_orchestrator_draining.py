"""A draining replica in the pure orchestrator core: it is chosen for nothing new, the requests it
holds finish there, a request it refused because its drain had begun goes to another replica
instead of failing, and a deployment's config can change under running requests."""

from __future__ import annotations

from stages.config import DeployConfig, StageDeployConfig
from stages.echo import family as echo_family
from stages.orchestrator import (
    Complete,
    DeploymentUp,
    Emit,
    Fail,
    Orchestrator,
    ReplicaDraining,
    ReplicaUp,
    SendToReplica,
    StageOutputEvent,
    Submit,
    Tick,
)
from stages.protocol import StageError, StageOutput, StageRequest

DEPLOYMENT = "dep"


def core_with(*replicas: str) -> Orchestrator:
    core = Orchestrator()
    pipeline = echo_family.pipeline_named("default")
    core.handle(DeploymentUp(deployment_id=DEPLOYMENT, pipeline=pipeline, deploy=DeployConfig()))
    for replica_id in replicas:
        core.handle(ReplicaUp(replica_id=replica_id, deployment_id=DEPLOYMENT, stage="echo"))
    return core


def submit(core, request_id: str) -> list:
    return core.handle(Submit(deployment_id=DEPLOYMENT, request=StageRequest(request_id=request_id, prompt="a b")))


def sent_to(actions) -> list[str]:
    return [action.replica_id for action in actions if isinstance(action, SendToReplica)]


def finish(core, wire_id: str, replica_id: str) -> list:
    out = StageOutput(request_id=wire_id, stage_id=0, seq=0, text="a b", finished=True, finish_reason="stop")
    return core.handle(StageOutputEvent(output=out, replica_id=replica_id, at=1.0))


def test_a_draining_replica_gets_nothing_new_and_finishes_what_it_holds():
    core = core_with("old")
    assert sent_to(submit(core, "r1")) == ["old"]
    core.handle(ReplicaDraining(replica_id="old"))
    assert sent_to(submit(core, "r2")) == []  # waits for a replica that takes requests
    assert sent_to(core.handle(ReplicaUp(replica_id="new", deployment_id=DEPLOYMENT, stage="echo"))) == ["new"]
    assert sent_to(submit(core, "r3")) == ["new"]

    done = finish(core, "r1", "old")  # the held request completes on the draining replica
    assert [a for a in done if isinstance(a, Complete)] and not [a for a in done if isinstance(a, Fail)]


def test_a_request_refused_by_a_replica_that_began_draining_goes_elsewhere():
    core = core_with("old", "new")
    (target,) = sent_to(submit(core, "r1"))
    other = "new" if target == "old" else "old"
    refusal = StageOutput(
        request_id="r1",
        stage_id=0,
        seq=0,
        finished=True,
        finish_reason="error",
        error=StageError(message="replica is draining", code="replica_draining"),
    )
    actions = core.handle(StageOutputEvent(output=refusal, replica_id=target, at=1.0))
    assert not [a for a in actions if isinstance(a, Fail | Emit)]
    (resend,) = [a for a in actions if isinstance(a, SendToReplica)]
    assert resend.replica_id == other and resend.request.request_id == "r1~r1"
    assert sent_to(submit(core, "r2")) == [other]  # the refusing replica is draining now
    assert [a for a in finish(core, "r1~r1", other) if isinstance(a, Complete)]


def test_other_errors_still_fail_the_request():
    core = core_with("only")
    submit(core, "r1")
    error = StageOutput(
        request_id="r1", stage_id=0, seq=0, finished=True, finish_reason="error", error=StageError(message="boom")
    )
    actions = core.handle(StageOutputEvent(output=error, replica_id="only", at=1.0))
    assert [a for a in actions if isinstance(a, Fail)]


def test_a_changed_deploy_config_applies_to_new_requests():
    core = core_with("r")
    pipeline = echo_family.pipeline_named("default")
    core.handle(Tick(at=0.0))
    changed = DeployConfig(max_queue=1, stages={"echo": StageDeployConfig(sampling={"max_tokens": 1})})
    core.handle(DeploymentUp(deployment_id=DEPLOYMENT, pipeline=pipeline, deploy=changed))
    assert sent_to(submit(core, "r1")) == ["r"]
    (fail,) = submit(core, "r2")
    assert isinstance(fail, Fail) and fail.error.code == "queue_full"
    assert core.deployments[DEPLOYMENT].deploy.sampling_override(pipeline.stages[0]) == {"max_tokens": 1}
