"""The orchestrator core with stage groups: it sends only into a group's entry stage, on the
group's replica, forwards nothing along the edges inside a group, and ends the group's inner
stages with the ones that send outputs back."""

from __future__ import annotations

from stages.config import load_deploy_config
from stages.models import get_family
from stages.orchestrator import (
    Cancel,
    Complete,
    DeploymentUp,
    Emit,
    Fail,
    Orchestrator,
    ReplicaDown,
    ReplicaUp,
    SendAbort,
    SendToReplica,
    StageOutputEvent,
    Submit,
    Tick,
)
from stages.protocol import RequestOptions, SamplingParams, StageError, StageOutput, StageRequest, Tensor

DEPLOYMENT = "dep"
OMNI = get_family("qwen2_5_omni").pipeline
WHOLE = {name: {"group": "omni"} for name in ("thinker", "talker", "code2wav")}
SPEECH = {"talker": {"group": "speech"}, "code2wav": {"group": "speech"}}


def make_core(stages: dict, replicas: dict[str, list[str]], **deploy) -> Orchestrator:
    core = Orchestrator()
    config = load_deploy_config({"stages": stages, **deploy}, OMNI)
    core.handle(DeploymentUp(deployment_id=DEPLOYMENT, pipeline=OMNI, deploy=config))
    for stage, replica_ids in replicas.items():
        for replica_id in replica_ids:
            core.handle(ReplicaUp(replica_id=replica_id, deployment_id=DEPLOYMENT, stage=stage))
    return core


def submit(core, request_id="r1", at=0.0, **fields):
    request = StageRequest(request_id=request_id, prompt="hi", **fields)
    sampling = {"talker": SamplingParams(max_tokens=7)}
    return core.handle(Submit(deployment_id=DEPLOYMENT, request=request, sampling=sampling, at=at))


def output(core, stage_id, seq=0, finished=False, at=1.0, replica_id=None, request_id="r1", **fields):
    out = StageOutput(
        request_id=request_id,
        stage_id=stage_id,
        seq=seq,
        finished=finished,
        finish_reason="stop" if finished else None,
        **fields,
    )
    return core.handle(StageOutputEvent(output=out, replica_id=replica_id, at=at))


def of_type(actions, kind):
    return [action for action in actions if isinstance(action, kind)]


def audio(samples=4) -> Tensor:
    return Tensor(dtype="float32", shape=[samples], data=bytes(4 * samples))


def test_the_entry_goes_to_the_least_loaded_group_replica_with_the_inner_stages_sampling():
    core = make_core(WHOLE, {"thinker": ["g-0", "g-1"]})
    submit(core, request_id="r0")
    (send,) = of_type(submit(core, request_id="r1"), SendToReplica)
    assert send.replica_id == "g-1"
    assert send.request.stage_id == 0
    assert send.request.group_sampling["talker"].max_tokens == 7


def test_nothing_is_forwarded_inside_a_group_and_text_and_audio_reach_the_client():
    core = make_core(WHOLE, {"thinker": ["g-0"]})
    submit(core)
    text = output(core, 0, text="hello", token_ids=[1], payloads={"hidden": audio()}, replica_id="g-0")
    assert of_type(text, SendToReplica) == []
    assert [e.output.text for e in of_type(text, Emit)] == ["hello"]
    assert "hidden" not in of_type(text, Emit)[0].output.payloads
    assert of_type(output(core, 0, seq=1, finished=True, replica_id="g-0"), SendToReplica) == []
    sound = output(core, 2, payloads={"audio": audio()}, params={"sample_rate": 4}, replica_id="g-0")
    assert [e.output.payloads["audio"].shape for e in of_type(sound, Emit)] == [[4]]
    done = output(core, 2, seq=1, finished=True, replica_id="g-0")
    (complete,) = of_type(done, Complete)
    assert of_type(done, SendAbort) == []  # the talker ended with the group: nothing left to abort
    assert complete.summary.metrics["ttfp_s"] == 1.0
    assert core.requests == {}


def test_outputs_of_the_group_from_another_replica_are_ignored():
    core = make_core(WHOLE, {"thinker": ["g-0", "g-1"]})
    submit(core)
    assert output(core, 2, payloads={"audio": audio()}, params={"sample_rate": 4}, replica_id="g-1") == []


def test_a_group_after_the_entry_gets_the_thinker_outputs_on_its_entry_only():
    core = make_core(SPEECH, {"thinker": ["t-0"], "talker": ["s-0"]})
    submit(core)
    sends = of_type(output(core, 0, text="a", token_ids=[1], replica_id="t-0"), SendToReplica)
    assert [(s.replica_id, s.request.stage_id) for s in sends] == [("s-0", 1)]
    assert sends[0].request.group_sampling == {}  # code2wav samples nothing of its own
    more = of_type(output(core, 0, seq=1, text="b", token_ids=[2], finished=True, replica_id="t-0"), SendToReplica)
    assert [(s.replica_id, s.request.stage_id, s.request.seq, s.request.finished) for s in more] == [
        ("s-0", 1, 1, True)
    ]
    done = output(core, 2, finished=True, payloads={"audio": audio()}, params={"sample_rate": 4}, replica_id="s-0")
    assert len(of_type(done, Complete)) == 1


def test_cancel_sends_one_abort_to_the_group_replica():
    core = make_core(WHOLE, {"thinker": ["g-0"]})
    submit(core)
    output(core, 0, text="a", replica_id="g-0")
    output(core, 0, seq=1, finished=True, replica_id="g-0")
    actions = core.handle(Cancel(request_id="r1", at=2.0))
    assert [a.replica_id for a in of_type(actions, SendAbort)] == ["g-0"]
    assert len(of_type(actions, Fail)) == 1


def test_an_error_from_an_inner_stage_fails_the_request_naming_that_stage():
    core = make_core(WHOLE, {"thinker": ["g-0"]})
    submit(core)
    error = StageError(message="boom")
    actions = output(core, 1, finished=True, error=error, replica_id="g-0")
    (fail,) = of_type(actions, Fail)
    assert "talker" in fail.error.message
    assert [a.replica_id for a in of_type(actions, SendAbort)] == ["g-0"]


def test_the_inner_stage_stays_alive_while_the_group_sends_outputs():
    core = make_core(WHOLE, {"thinker": ["g-0"]}, hop_timeout_s=5.0)
    submit(core, at=0.0)
    output(core, 0, text="a", finished=True, at=1.0, replica_id="g-0")
    output(core, 2, payloads={"audio": audio()}, params={"sample_rate": 4}, at=5.0, replica_id="g-0")
    assert of_type(core.handle(Tick(at=9.0)), Fail) == []  # the talker's last sign of life is code2wav's
    (fail,) = of_type(core.handle(Tick(at=10.5)), Fail)
    assert fail.error.code == "hop_timeout"


def test_a_text_only_request_completes_when_the_thinker_finishes():
    core = make_core(WHOLE, {"thinker": ["g-0"]})
    submit(core, options=RequestOptions(modalities=["text"]))
    done = output(core, 0, text="a", finished=True, replica_id="g-0")
    assert len(of_type(done, Complete)) == 1


def test_a_group_replica_that_goes_down_reroutes_the_whole_request():
    core = make_core(WHOLE, {"thinker": ["g-0", "g-1"]})
    (first,) = of_type(submit(core), SendToReplica)
    actions = core.handle(ReplicaDown(replica_id=first.replica_id, at=1.0))
    (again,) = of_type(actions, SendToReplica)
    assert again.replica_id != first.replica_id and again.request.request_id == "r1~r1"
    assert again.request.group_sampling["talker"].max_tokens == 7
