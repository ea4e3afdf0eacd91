"""A request's queue time: from its submission to its first stage placed on a replica."""

from __future__ import annotations

from stages.config import DeployConfig
from stages.echo import family as echo_family
from stages.orchestrator import Complete, DeploymentUp, Orchestrator, ReplicaUp, StageOutputEvent, Submit
from stages.protocol import StageOutput, StageRequest


def finish(core: Orchestrator, at: float) -> Complete:
    output = StageOutput(request_id="r1", stage_id=0, seq=0, text="a", finished=True, finish_reason="stop")
    actions = core.handle(StageOutputEvent(output=output, replica_id=None, at=at))
    (complete,) = [action for action in actions if isinstance(action, Complete)]
    return complete


def core_without_replicas() -> Orchestrator:
    core = Orchestrator()
    pipeline = echo_family.pipeline_named("default")
    core.handle(DeploymentUp(deployment_id="dep", pipeline=pipeline, deploy=DeployConfig()))
    return core


def test_a_request_that_waited_for_a_replica_has_that_wait_as_its_queue_time():
    core = core_without_replicas()
    core.handle(Submit(deployment_id="dep", request=StageRequest(request_id="r1", prompt="a"), at=10.0))
    core.handle(ReplicaUp(replica_id="late", deployment_id="dep", stage="echo", at=12.5))
    metrics = finish(core, at=13.0).summary.metrics
    assert metrics["queue_s"] == 2.5 and metrics["e2el_s"] == 3.0


def test_a_request_placed_at_once_has_no_queue_time():
    core = core_without_replicas()
    core.handle(ReplicaUp(replica_id="echo-0", deployment_id="dep", stage="echo", at=0.0))
    core.handle(Submit(deployment_id="dep", request=StageRequest(request_id="r1", prompt="a"), at=10.0))
    assert finish(core, at=10.5).summary.metrics["queue_s"] == 0.0
