"""The pure orchestrator core: events in, actions out. No engines, no threads, no clock."""

from __future__ import annotations

import msgspec

from stages.config import DeployConfig, EdgeConfig, PipelineConfig, StageConfig
from stages.echo import family as echo_family
from stages.orchestrator import (
    Cancel,
    Complete,
    DeploymentUp,
    Emit,
    Fail,
    InputChunk,
    Orchestrator,
    ReplicaDown,
    ReplicaUp,
    SendAbort,
    SendToReplica,
    StageOutputEvent,
    Submit,
    Tick,
    decode_state,
    encode_state,
)
from stages.protocol import RequestOptions, SamplingParams, StageError, StageOutput, StageRequest, Tensor

DEPLOYMENT = "dep"


def make_core(variant="default", replicas=None, **deploy) -> Orchestrator:
    pipeline = echo_family.pipeline_named(variant)
    core = Orchestrator()
    core.handle(DeploymentUp(deployment_id=DEPLOYMENT, pipeline=pipeline, deploy=DeployConfig(**deploy)))
    for stage in pipeline.stages:
        for replica_id in (replicas or {}).get(stage.name, [f"{stage.name}-0"]):
            core.handle(ReplicaUp(replica_id=replica_id, deployment_id=DEPLOYMENT, stage=stage.name))
    return core


def submit(core, request_id="r1", prompt="a b c", at=0.0, **fields):
    request = StageRequest(request_id=request_id, prompt=prompt, **fields)
    return core.handle(Submit(deployment_id=DEPLOYMENT, request=request, at=at))


def output(core, request_id="r1", stage_id=0, seq=0, text="", finished=False, at=1.0, replica_id=None, **fields):
    out = StageOutput(
        request_id=request_id,
        stage_id=stage_id,
        seq=seq,
        text=text,
        finished=finished,
        finish_reason="stop" if finished else None,
        **fields,
    )
    return core.handle(StageOutputEvent(output=out, replica_id=replica_id, at=at))


def of_type(actions, kind):
    return [action for action in actions if isinstance(action, kind)]


def test_single_stage_request_is_sent_emitted_and_completed_with_metrics():
    core = make_core()
    actions = submit(core, at=10.0)
    assert actions == [SendToReplica(replica_id="echo-0", request=actions[0].request)]
    assert actions[0].request.prompt == "a b c" and actions[0].request.seq == 0

    first = output(core, text="a", token_ids=[1], at=10.5)
    second = output(core, seq=1, text=" b", token_ids=[2], at=10.7)
    last = output(core, seq=2, text=" c", token_ids=[3], finished=True, at=10.9)

    assert [a.output.text for a in of_type(first + second + last, Emit)] == ["a", " b", " c"]
    (complete,) = of_type(last, Complete)
    metrics = complete.summary.metrics
    assert complete.summary.finish_reason == "stop"
    assert abs(metrics["ttft_s"] - 0.5) < 1e-9
    assert abs(metrics["tpot_s"] - 0.2) < 1e-9
    assert abs(metrics["e2el_s"] - 0.9) < 1e-9
    assert abs(metrics["stage.echo.duration_s"] - 0.9) < 1e-9
    assert complete.summary.usage["completion_tokens"] == 3
    assert core.requests == {}


def test_prompt_tokens_are_what_the_entry_stage_read():
    """The engine's `num_prompt_tokens` (its chat template applied): a request sent as messages
    or text has no token ids of its own to count, and a later stage's prompt is not the user's."""
    core = make_core("chain")
    submit(core, prompt=None, messages=[{"role": "user", "content": "a b c"}])
    output(core, text="a", token_ids=[1], metrics={"num_prompt_tokens": 17})
    output(core, seq=1, text=" b", token_ids=[2], finished=True, metrics={"num_prompt_tokens": 17})
    done = output(core, stage_id=1, text="a b", token_ids=[1, 2], finished=True, metrics={"num_prompt_tokens": 99})
    (complete,) = of_type(done, Complete)
    assert complete.summary.usage["prompt_tokens"] == 17 and complete.summary.usage["completion_tokens"] == 2

    core = make_core()
    submit(core, prompt=None, prompt_token_ids=[5, 6, 7, 8])  # an engine that does not say: the ids given
    (complete,) = of_type(output(core, text="a", token_ids=[1], finished=True), Complete)
    assert complete.summary.usage["prompt_tokens"] == 4


def test_redelivered_outputs_are_emitted_once():
    core = make_core()
    submit(core)
    once = output(core, text="a")
    again = output(core, text="a")
    assert len(of_type(once, Emit)) == 1 and again == []
    done = output(core, seq=1, text="b", finished=True)
    assert len(of_type(done, Complete)) == 1
    assert output(core, seq=1, text="b", finished=True) == []  # after completion too


def test_out_of_order_outputs_wait_for_the_gap():
    core = make_core()
    submit(core)
    assert output(core, seq=2, text="c", finished=True) == []
    assert output(core, seq=1, text="b") == []
    actions = output(core, seq=0, text="a")
    assert [a.output.seq for a in of_type(actions, Emit)] == [0, 1, 2]
    assert len(of_type(actions, Complete)) == 1


def test_streaming_edge_forwards_each_chunk_and_only_the_last_stage_reaches_the_client():
    core = make_core("chain")
    submit(core)
    a = output(core, text="a", token_ids=[1])
    b = output(core, seq=1, text=" b", token_ids=[2], finished=True)
    sends = of_type(a + b, SendToReplica)
    assert [s.replica_id for s in sends] == ["echo2-0", "echo2-0"]
    assert [(s.request.seq, s.request.prompt, s.request.prompt_token_ids, s.request.finished) for s in sends] == [
        (0, "a", [1], False),
        (1, " b", [2], True),
    ]
    assert sends[0].request.stage_id == 1 and sends[0].request.params["source_stage"] == 0
    assert of_type(a + b, Emit) == []

    done = output(core, stage_id=1, text="a b", finished=True)
    assert [e.output.text for e in of_type(done, Emit)] == ["a b"]
    assert len(of_type(done, Complete)) == 1


def test_non_streaming_edge_sends_the_concatenated_output_once_the_source_finished():
    core = make_core("chain-batch")
    submit(core)
    hidden = [Tensor(dtype="float32", shape=[1, 2], data=bytes(8)) for _ in range(2)]
    assert of_type(output(core, text="a", token_ids=[1], payloads={"hidden": hidden[0]}), SendToReplica) == []
    actions = output(core, seq=1, text=" b", token_ids=[2], payloads={"hidden": hidden[1]}, finished=True)
    (send,) = of_type(actions, SendToReplica)
    request = send.request
    assert (request.seq, request.prompt, request.prompt_token_ids, request.finished) == (0, "a b", [1, 2], True)
    assert request.payloads["hidden"].shape == [2, 2]


def test_downstream_sampling_comes_from_the_submit():
    core = make_core("chain")
    request = StageRequest(request_id="r1", prompt="x", options=RequestOptions(voice="v"), params={"k": 1})
    core.handle(Submit(deployment_id=DEPLOYMENT, request=request, sampling={"echo2": SamplingParams(max_tokens=3)}))
    (send,) = of_type(output(core, text="x", finished=True), SendToReplica)
    assert send.request.sampling.max_tokens == 3
    assert send.request.options.voice == "v" and send.request.params["k"] == 1


def test_cancel_aborts_every_replica_holding_the_request():
    core = make_core("chain")
    submit(core)
    output(core, text="a")
    actions = core.handle(Cancel(request_id="r1", at=2.0))
    assert sorted(a.replica_id for a in of_type(actions, SendAbort)) == ["echo-0", "echo2-0"]
    (fail,) = of_type(actions, Fail)
    assert fail.error.type == "cancelled"
    assert output(core, seq=1, text="b") == []
    assert core.handle(Cancel(request_id="r1")) == []


def test_a_stuck_hop_fails_with_a_timeout_naming_the_stage():
    core = make_core(hop_timeout_s=5.0)
    submit(core, at=0.0)
    output(core, text="a", at=1.0)
    assert core.handle(Tick(at=5.5)) == []
    actions = core.handle(Tick(at=6.5))
    (fail,) = of_type(actions, Fail)
    assert fail.error.type == "timeout_error" and fail.error.code == "hop_timeout"
    assert "stage 'echo' on replica echo-0" in fail.error.message and "hop_timeout_s=5" in fail.error.message
    assert of_type(actions, SendAbort) == [SendAbort(replica_id="echo-0", request_id="r1")]


def test_the_whole_request_times_out_even_while_it_progresses():
    core = make_core(request_timeout_s=3.0, hop_timeout_s=2.0)
    submit(core, at=0.0)
    for seq in range(3):
        output(core, seq=seq, text="x", at=1.0 + seq)
    (fail,) = of_type(core.handle(Tick(at=3.5)), Fail)
    assert fail.error.code == "request_timeout"


def test_a_stage_without_replicas_waits_for_one_then_times_out():
    core = make_core(replicas={"echo": []}, hop_timeout_s=5.0)
    assert submit(core, at=0.0) == []
    sends = core.handle(ReplicaUp(replica_id="late", deployment_id=DEPLOYMENT, stage="echo", at=1.0))
    assert [s.replica_id for s in of_type(sends, SendToReplica)] == ["late"]

    submit(core, request_id="r2", at=0.0)  # placed on "late" at once
    core.handle(ReplicaDown(replica_id="late", at=2.0))  # both re-routed, nowhere to go
    (fail_a, fail_b) = of_type(core.handle(Tick(at=8.0)), Fail)
    assert {fail_a.error.code, fail_b.error.code} == {"no_replica"}


def test_admission_rejects_beyond_max_queue_with_a_clear_error():
    core = make_core(max_queue=2)
    submit(core, "r1")
    submit(core, "r2")
    (fail,) = submit(core, "r3")
    assert isinstance(fail, Fail) and fail.error.code == "queue_full" and "max_queue" in fail.error.message
    output(core, "r1", text="x", finished=True)
    assert of_type(submit(core, "r4"), SendToReplica)


def test_resubmitting_the_same_request_id_is_idempotent():
    core = make_core()
    assert submit(core)
    assert submit(core) == []


def test_least_loaded_replica_is_chosen_and_chunks_stick_to_it():
    core = make_core("chain", replicas={"echo": ["e-a", "e-b"], "echo2": ["f-a", "f-b"]})
    first = of_type(submit(core, "r1"), SendToReplica)[0].replica_id
    second = of_type(submit(core, "r2"), SendToReplica)[0].replica_id
    assert {first, second} == {"e-a", "e-b"}
    targets = {of_type(output(core, rid, seq=0, text="a"), SendToReplica)[0].replica_id for rid in ("r1", "r2")}
    assert targets == {"f-a", "f-b"}
    again = of_type(output(core, "r1", seq=1, text="b"), SendToReplica)[0].replica_id
    assert again == of_type(output(core, "r1", seq=2, text="c"), SendToReplica)[0].replica_id


def two_host_chain() -> tuple[Orchestrator, dict[str, str]]:
    """The chain pipeline with a replica of each stage on each of two hosts: (core, host of each replica)."""
    core = make_core("chain", replicas={"echo": [], "echo2": []})
    hosts = {"e-a": "host-a", "e-b": "host-b", "f-a": "host-a", "f-b": "host-b"}
    for replica_id, host in hosts.items():
        stage = "echo" if replica_id.startswith("e") else "echo2"
        core.handle(ReplicaUp(replica_id=replica_id, deployment_id=DEPLOYMENT, stage=stage, host=host))
    return core, hosts


def test_the_next_stage_runs_on_the_host_of_the_stage_feeding_it_when_one_of_its_replicas_is_there():
    core, hosts = two_host_chain()
    placed = {rid: of_type(submit(core, rid), SendToReplica)[0].replica_id for rid in ("r1", "r2", "r3", "r4")}
    readers = {rid: of_type(output(core, rid, seq=0, text="a"), SendToReplica)[0].replica_id for rid in placed}
    assert {rid: hosts[readers[rid]] for rid in placed} == {rid: hosts[placed[rid]] for rid in placed}
    assert sorted(placed.values()) == ["e-a", "e-a", "e-b", "e-b"]  # the entry stage is still balanced

    apart = make_core("chain", replicas={"echo": [], "echo2": []})
    apart.handle(ReplicaUp(replica_id="e-b", deployment_id=DEPLOYMENT, stage="echo", host="host-b"))
    apart.handle(ReplicaUp(replica_id="f-a", deployment_id=DEPLOYMENT, stage="echo2", host="host-a"))
    submit(apart, "r5")
    assert of_type(output(apart, "r5", seq=0, text="a"), SendToReplica)[0].replica_id == "f-a"  # none on its host


def test_a_newcomer_goes_to_the_host_running_fewer_requests_once_the_entry_stage_has_let_go():
    core, hosts = two_host_chain()
    first = of_type(submit(core, "r1"), SendToReplica)[0].replica_id
    output(core, "r1", seq=0, text="a b c", finished=True)  # the entry stage is done, its next stage runs on
    second = of_type(submit(core, "r2"), SendToReplica)[0].replica_id
    assert hosts[second] != hosts[first]
    output(core, "r2", seq=0, text="a b c", finished=True)
    third = of_type(submit(core, "r3"), SendToReplica)[0].replica_id
    assert third == first  # a tie between idle entry replicas goes to the least recently chosen


def test_replica_down_before_client_output_reroutes_under_a_new_wire_id():
    core = make_core("chain", replicas={"echo": ["e-a", "e-b"], "echo2": ["f-a"]})
    (send,) = of_type(submit(core), SendToReplica)
    output(core, text="a")  # reached echo2, not the client
    actions = core.handle(ReplicaDown(replica_id=send.replica_id, at=2.0))
    aborts, sends = of_type(actions, SendAbort), of_type(actions, SendToReplica)
    assert aborts == [SendAbort(replica_id="f-a", request_id="r1")]
    (resend,) = sends
    assert resend.replica_id != send.replica_id and resend.request.request_id == "r1~r1"
    assert output(core, "r1", stage_id=1, text="stale") == []  # the abandoned attempt is ignored
    output(core, "r1~r1", text="a b", finished=True)
    done = output(core, "r1~r1", stage_id=1, text="a b", finished=True)
    (emit,) = of_type(done, Emit)
    assert emit.request_id == "r1" and emit.output.request_id == "r1"
    (complete,) = of_type(done, Complete)
    assert complete.summary.attempts == 2


def test_replica_down_after_client_output_fails_the_request():
    core = make_core(replicas={"echo": ["e-a", "e-b"]})
    (send,) = of_type(submit(core), SendToReplica)
    output(core, text="a")
    (fail,) = of_type(core.handle(ReplicaDown(replica_id=send.replica_id, reason="heartbeat lost")), Fail)
    assert fail.error.code == "replica_down" and "reached the client" in fail.error.message


def test_an_engine_error_fails_the_request_naming_the_stage_and_aborts_the_rest():
    core = make_core("chain")
    submit(core)
    output(core, text="a")
    error = StageError(message="boom", type="server_error")
    actions = output(core, stage_id=1, seq=0, error=error, finished=True)
    (fail,) = of_type(actions, Fail)
    assert fail.error.message == "stage 'echo2': boom"
    assert SendAbort(replica_id="echo-0", request_id="r1") in actions


def test_outputs_from_a_replica_not_holding_the_stage_are_ignored():
    core = make_core()
    submit(core)
    assert output(core, text="a", replica_id="someone-else") == []
    assert of_type(output(core, text="a", replica_id="echo-0"), Emit)


def test_request_state_survives_a_restart_of_the_orchestrator():
    core = make_core("chain")
    submit(core, at=0.0)
    output(core, text="a", at=1.0)
    changed, removed = core.take_changes()
    assert changed == {"r1"} and removed == set()
    saved = encode_state(core.requests["r1"])

    fresh = Orchestrator()
    fresh.handle(
        DeploymentUp(deployment_id=DEPLOYMENT, pipeline=echo_family.pipeline_named("chain"), deploy=DeployConfig())
    )
    fresh.restore(decode_state(saved))
    for stage, replica_id in (("echo", "echo-0"), ("echo2", "echo2-0")):
        fresh.handle(ReplicaUp(replica_id=replica_id, deployment_id=DEPLOYMENT, stage=stage))
    assert fresh.replicas["echo2-0"].holding == {"r1/1"}
    assert output(fresh, text="a", at=1.5) == []  # already processed before the restart
    (send,) = of_type(output(fresh, seq=1, text=" b", finished=True, at=2.0), SendToReplica)
    assert send.request.seq == 1 and send.request.finished
    done = output(fresh, stage_id=1, text="a b", finished=True, at=3.0)
    assert of_type(done, Complete)[0].summary.metrics["e2el_s"] == 3.0
    assert fresh.take_changes()[1] == {"r1"}


def test_audio_stage_gives_ttfp_and_hidden_payloads_stay_inside():
    core = make_core("voice")
    submit(core, at=0.0)
    hidden = Tensor(dtype="float32", shape=[1], data=bytes(4))
    text = output(core, text="a", payloads={"hidden": hidden}, at=0.2)
    (emit,) = of_type(text, Emit)
    assert emit.output.payloads == {}
    assert of_type(text, SendToReplica)[0].request.payloads == {"hidden": hidden}
    output(core, seq=1, text="", finished=True, at=0.3)
    audio = Tensor(dtype="float32", shape=[2], data=bytes(8))
    voice = output(core, stage_id=1, payloads={"audio": audio}, params={"sample_rate": 16000}, at=0.5)
    assert of_type(voice, Emit)[0].output.payloads == {"audio": audio}
    (complete,) = of_type(output(core, stage_id=1, seq=1, finished=True, at=0.6), Complete)
    assert abs(complete.summary.metrics["ttfp_s"] - 0.5) < 1e-9
    assert abs(complete.summary.metrics["ttft_s"] - 0.2) < 1e-9
    assert complete.summary.metrics["audio_s"] == 2 / 16000 and complete.summary.metrics["rtf"] == 0.6 / (2 / 16000)


def test_streamed_client_input_goes_to_the_entry_stage_in_order():
    core = make_core()
    (first,) = of_type(submit(core, finished=False), SendToReplica)
    assert first.request.finished is False
    chunk = StageRequest(request_id="r1", prompt=" more", finished=True)
    (send,) = of_type(core.handle(InputChunk(request_id="r1", chunk=chunk)), SendToReplica)
    assert (send.request.seq, send.request.prompt, send.request.replica_id if False else send.replica_id) == (
        1,
        " more",
        "echo-0",
    )


def test_fan_in_target_finishes_only_after_every_source():
    pipeline = PipelineConfig(
        family="test",
        name="fan-in",
        stages=[
            StageConfig(id=0, name="a", kind="ar"),
            StageConfig(id=1, name="b", kind="ar"),
            StageConfig(id=2, name="c", kind="ar", output="text"),
        ],
        edges=[
            EdgeConfig(source=0, target=1, streaming=True),
            EdgeConfig(source=0, target=2),
            EdgeConfig(source=1, target=2),
        ],
    )
    core = Orchestrator()
    core.handle(DeploymentUp(deployment_id=DEPLOYMENT, pipeline=pipeline, deploy=DeployConfig()))
    for name in "abc":
        core.handle(ReplicaUp(replica_id=name, deployment_id=DEPLOYMENT, stage=name))
    submit(core)
    sends = of_type(output(core, text="x", finished=True), SendToReplica)
    to_c = [s for s in sends if s.replica_id == "c"]
    assert len(to_c) == 1 and to_c[0].request.finished is False
    (last,) = of_type(output(core, stage_id=1, text="y", finished=True), SendToReplica)
    assert last.replica_id == "c" and last.request.seq == 1 and last.request.finished is True


def test_events_and_actions_round_trip_through_msgpack():
    core = make_core()
    actions = submit(core)
    encoded = msgspec.msgpack.encode(actions)
    from stages.orchestrator.actions import AnyAction

    assert msgspec.msgpack.decode(encoded, type=list[AnyAction]) == actions


def test_an_error_ends_the_request_whatever_its_seq():
    core = make_core()
    submit(core)
    output(core, seq=0, text="a")
    output(core, seq=1, text="b")
    error = StageError(message="add_chunk failed", type="invalid_request_error", param="prompt")
    (fail,) = of_type(output(core, seq=0, error=error, finished=True), Fail)
    assert fail.error.param == "prompt" and fail.error.message == "add_chunk failed"


def test_duplicated_and_shuffled_delivery_gives_each_client_its_text_once_in_order():
    """At-least-once streams: every output may arrive twice and out of order, across requests."""
    import random

    rng = random.Random(0)
    core = make_core("chain", max_queue=100)
    words = {f"r{i}": [f" w{i}.{j}" for j in range(rng.randint(1, 6))] for i in range(30)}
    for request_id in words:
        submit(core, request_id)
    pending = [
        StageOutput(
            request_id=rid,
            stage_id=0,
            seq=j,
            text=w,
            finished=j == len(ws) - 1,
            finish_reason="stop" if j == len(ws) - 1 else None,
        )
        for rid, ws in words.items()
        for j, w in enumerate(ws)
    ]
    emitted: dict[str, list[str]] = {rid: [] for rid in words}
    completed: set[str] = set()
    forwarded: dict[str, list[str]] = {rid: [] for rid in words}
    while pending:
        rng.shuffle(pending)
        batch, pending = pending[:5], pending[5:]
        for out in batch + [o for o in batch if rng.random() < 0.5]:  # some twice
            for action in core.handle(StageOutputEvent(output=out)):
                if isinstance(action, SendToReplica):  # stage 1 echoes each chunk back, also shuffled in
                    request = action.request
                    forwarded[request.request_id].append(request.prompt)
                    pending.append(
                        StageOutput(
                            request_id=request.request_id,
                            stage_id=1,
                            seq=request.seq,
                            text=request.prompt,
                            finished=request.finished,
                            finish_reason="stop" if request.finished else None,
                        )
                    )
                elif isinstance(action, Emit):
                    emitted[action.request_id].append(action.output.text)
                elif isinstance(action, Complete):
                    assert action.request_id not in completed
                    completed.add(action.request_id)
    assert completed == set(words)
    for rid, ws in words.items():
        assert forwarded[rid] == ws
        assert emitted[rid] == ws
    assert core.requests == {}


def test_the_qwen_omni_graph_streams_thinker_to_talker_to_code2wav():
    from stages.models import get_family

    pipeline = get_family("qwen2_5_omni").pipeline
    core = Orchestrator()
    core.handle(DeploymentUp(deployment_id=DEPLOYMENT, pipeline=pipeline, deploy=DeployConfig()))
    for stage in pipeline.stages:
        core.handle(ReplicaUp(replica_id=stage.name, deployment_id=DEPLOYMENT, stage=stage.name))
    core.handle(
        Submit(
            deployment_id=DEPLOYMENT,
            request=StageRequest(request_id="q", messages=[{"role": "user", "content": "hi"}]),
            at=0.0,
        )
    )
    hidden = Tensor(dtype="float32", shape=[1, 4], data=bytes(16))
    thinker = output(core, "q", stage_id=0, text="Hel", token_ids=[1], payloads={"hidden": hidden}, at=0.1)
    (emit,) = of_type(thinker, Emit)
    assert emit.output.text == "Hel" and emit.output.payloads == {}
    (to_talker,) = of_type(thinker, SendToReplica)
    assert to_talker.replica_id == "talker" and to_talker.request.payloads["hidden"] == hidden
    assert to_talker.request.sampling.max_tokens == 2048  # the talker's default sampling from the pipeline
    codes = Tensor(dtype="int64", shape=[1, 1], data=bytes(8))
    (to_vocoder,) = of_type(
        output(core, "q", stage_id=1, token_ids=[7], payloads={"codes": codes}, at=0.2), SendToReplica
    )
    assert to_vocoder.replica_id == "code2wav" and to_vocoder.request.payloads["codes"] == codes
    audio = Tensor(dtype="float32", shape=[2400], data=bytes(9600))
    (audio_emit,) = of_type(
        output(core, "q", stage_id=2, payloads={"audio": audio}, params={"sample_rate": 24000}, at=0.3), Emit
    )
    assert audio_emit.output.payloads == {"audio": audio}
    output(core, "q", stage_id=0, seq=1, text="lo", token_ids=[2], finished=True, at=0.4)
    (last_to_vocoder,) = of_type(output(core, "q", stage_id=1, seq=1, finished=True, at=0.5), SendToReplica)
    assert last_to_vocoder.request.finished
    (complete,) = of_type(output(core, "q", stage_id=2, seq=1, finished=True, at=0.6), Complete)
    metrics = complete.summary.metrics
    assert (metrics["ttft_s"], metrics["ttfp_s"], metrics["audio_s"]) == (0.1, 0.3, 0.1)
    assert complete.summary.finish_reason == "stop"
