"""What the core reports for a request's timeline and trace: each stage's start after submission,
its outputs and a bounded sample of when they came, the queue time; the submitter's traceparent
turned into the orchestrator's span for every stage's first input."""

from __future__ import annotations

from test_orchestrator_core import DEPLOYMENT, make_core, of_type, output, submit

from stages import tracing
from stages.orchestrator import Complete, ReplicaUp, SendToReplica
from stages.orchestrator.state import MAX_OUTPUT_MARKS, StageProgress


def test_stage_starts_outputs_and_their_marks_are_in_the_summary():
    core = make_core("chain")
    submit(core, at=10.0)
    output(core, text="a", token_ids=[1], at=10.5)
    output(core, seq=1, text=" b", token_ids=[2], finished=True, at=10.75)
    output(core, stage_id=1, text="a", token_ids=[1], at=11.0)
    done = output(core, stage_id=1, seq=1, text=" b", token_ids=[2], finished=True, at=11.5)
    (complete,) = of_type(done, Complete)
    metrics, marks = complete.summary.metrics, complete.summary.output_marks
    assert metrics["queue_s"] == 0.0  # both stages had a replica: placed at once
    assert metrics["stage.echo.started_s"] == 0.0 and metrics["stage.echo.outputs"] == 2
    assert metrics["stage.echo2.started_s"] == 0.5  # its first input is the echo stage's first output
    assert metrics["stage.echo2.first_output_s"] == 0.5 and metrics["stage.echo2.outputs"] == 2
    assert marks == {"echo": [0.5, 0.75], "echo2": [1.0, 1.5]}


def test_queue_time_is_the_wait_for_a_replica():
    core = make_core(replicas={"echo": []})
    submit(core, at=1.0)
    core.handle(ReplicaUp(replica_id="late-0", deployment_id=DEPLOYMENT, stage="echo", at=3.0))
    (complete,) = of_type(output(core, text="a", token_ids=[1], finished=True, at=4.0), Complete)
    assert complete.summary.metrics["queue_s"] == 2.0 and complete.summary.metrics["stage.echo.started_s"] == 2.0


def test_output_marks_stay_bounded_and_spread_over_the_whole_stage():
    progress = StageProgress(name="talker")
    for index in range(1000):
        progress.mark_output(float(index))
    assert progress.outputs == 1000
    assert MAX_OUTPUT_MARKS // 2 <= len(progress.output_marks) <= MAX_OUTPUT_MARKS
    gaps = {b - a for a, b in zip(progress.output_marks, progress.output_marks[1:], strict=False)}
    assert gaps == {float(progress.mark_every)}  # evenly spaced
    assert progress.output_marks[0] == 0.0 and progress.output_marks[-1] >= 1000 - progress.mark_every


def test_every_stage_gets_the_orchestrators_span_under_the_submitters():
    core = make_core("chain")
    parent = tracing.new_traceparent()
    (sent,) = of_type(submit(core, at=0.0, trace=parent), SendToReplica)
    orchestrate = tracing.child(parent, tracing.ORCHESTRATE)
    assert sent.request.trace == orchestrate
    assert tracing.trace_id_of(orchestrate) == tracing.trace_id_of(parent) and orchestrate != parent
    (forwarded,) = of_type(output(core, text="a", token_ids=[1], at=0.5), SendToReplica)
    assert forwarded.request.stage_id == 1 and forwarded.request.trace == orchestrate
    (chunk,) = of_type(output(core, seq=1, text=" b", token_ids=[2], finished=True, at=0.6), SendToReplica)
    assert chunk.request.seq == 1 and chunk.request.trace == ""  # only a stage's first input carries it
    output(core, stage_id=1, text="a b", token_ids=[1, 2], at=0.8)
    (complete,) = of_type(output(core, stage_id=1, seq=1, finished=True, at=0.9), Complete)
    assert complete.trace == parent and complete.submitted_at == 0.0


def test_a_request_without_a_trace_carries_none():
    core = make_core()
    (sent,) = of_type(submit(core), SendToReplica)
    assert sent.request.trace == ""
