"""The in-memory hand-over between the stages of a group: what the next stage gets, when, and
what leaves the group. No processes: outputs in, stage inputs and outgoing outputs back."""

from __future__ import annotations

from stages.config import load_deploy_config
from stages.echo import family as echo_family
from stages.groups import StageGroups
from stages.models import get_family
from stages.protocol import RequestOptions, SamplingParams, StageError, StageOutput, StageRequest
from workers.group_handover import GroupHandover

OMNI = get_family("qwen2_5_omni").pipeline
HIDDEN = object()  # tensors pass as the objects their engine made: never encoded


def handover(pipeline, stages) -> GroupHandover:
    groups = StageGroups(pipeline, load_deploy_config({"stages": stages}, pipeline))
    return GroupHandover(pipeline, next(iter(groups.groups.values())))


def whole_omni() -> GroupHandover:
    return handover(OMNI, {name: {"group": "g"} for name in ("thinker", "talker", "code2wav")})


def admit(chain: GroupHandover, **options) -> None:
    sampling = {"talker": SamplingParams(max_tokens=9)}
    request_options = RequestOptions(voice="v", **options)
    chain.admit(StageRequest(request_id="r", prompt="hi", options=request_options, group_sampling=sampling))


def test_a_streaming_edge_hands_each_output_on_with_the_hidden_states_and_strips_them_from_the_text():
    chain = whole_omni()
    admit(chain, extra={"use_audio_in_video": False})
    first = chain.route(
        StageOutput(request_id="r", stage_id=0, seq=0, text="a", token_ids=[1], payloads={"hidden": HIDDEN})
    )
    (talker_input,) = first.inputs
    assert (talker_input.stage_id, talker_input.seq, talker_input.finished) == (1, 0, False)
    assert talker_input.payloads["hidden"] is HIDDEN
    assert talker_input.sampling.max_tokens == 9 and talker_input.options.voice == "v"
    assert (
        talker_input.options.extra == {"use_audio_in_video": False} and "use_audio_in_video" not in talker_input.params
    )
    assert first.leaving.text == "a" and first.leaving.payloads == {}
    last = chain.route(StageOutput(request_id="r", stage_id=0, seq=1, finished=True, finish_reason="stop"))
    assert [(i.seq, i.finished, i.sampling) for i in last.inputs] == [(1, True, None)]
    assert last.leaving.finished


def test_the_inner_stage_sends_nothing_out_and_the_request_is_done_when_the_last_stage_finished():
    chain = whole_omni()
    admit(chain)
    chain.route(StageOutput(request_id="r", stage_id=0, seq=0, finished=True, text="a", token_ids=[1]))
    codes = chain.route(StageOutput(request_id="r", stage_id=1, seq=0, finished=True, token_ids=[5, 6]))
    assert codes.leaving is None
    assert [(i.stage_id, i.prompt_token_ids, i.finished) for i in codes.inputs] == [(2, [5, 6], True)]
    assert not chain.done("r")
    audio = chain.route(StageOutput(request_id="r", stage_id=2, seq=0, finished=True, payloads={"audio": HIDDEN}))
    assert audio.leaving.payloads == {"audio": HIDDEN}
    assert chain.done("r")


def test_a_text_only_request_never_reaches_the_talker():
    chain = whole_omni()
    admit(chain, modalities=["text"])
    done = chain.route(StageOutput(request_id="r", stage_id=0, seq=0, finished=True, text="a", token_ids=[1]))
    assert done.inputs == [] and chain.done("r")


def test_a_non_streaming_edge_hands_over_everything_once_the_source_finished():
    chain = handover(echo_family.pipeline_named("chain-batch"), {"echo": {"group": "g"}, "echo2": {"group": "g"}})
    chain.admit(StageRequest(request_id="r", prompt="a b"))
    assert chain.route(StageOutput(request_id="r", stage_id=0, seq=0, text="a")).inputs == []
    (batch,) = chain.route(StageOutput(request_id="r", stage_id=0, seq=1, text=" b", finished=True)).inputs
    assert (batch.prompt, batch.seq, batch.finished) == ("a b", 0, True)


def test_an_error_leaves_at_once_and_the_request_is_forgotten():
    chain = whole_omni()
    admit(chain)
    failed = chain.route(StageOutput(request_id="r", stage_id=1, finished=True, error=StageError(message="x")))
    assert failed.leaving.error.message == "x" and failed.inputs == []
    assert chain.route(StageOutput(request_id="r", stage_id=2, seq=0, payloads={"audio": HIDDEN})).leaving is None
