"""A request naming its output modalities runs only the stages that lead to them: the echo-voice
pipeline's 'voice' stage never sees a text-only request, which completes when its text does."""

from __future__ import annotations

from stages.models.qwen2_5_omni import family as omni_family
from stages.orchestrator import Complete, Emit, SendToReplica
from stages.orchestrator.wanted import unwanted_stages
from stages.protocol import RequestOptions
from tests.stages.orchestrator.test_orchestrator_core import make_core, of_type, output, submit


def test_unwanted_stages_follow_the_graph_back_from_the_requested_outputs():
    omni = omni_family.pipeline
    assert unwanted_stages(omni, ["text"]) == {1, 2}
    assert unwanted_stages(omni, ["audio"]) == set()
    assert unwanted_stages(omni, ["text", "audio"]) == set()
    assert unwanted_stages(omni, None) == set() and unwanted_stages(omni, []) == set()
    assert unwanted_stages(omni, ["image"]) == set()  # nothing it emits: left to the edge to refuse


def test_a_text_only_request_never_reaches_the_voice_stage():
    core = make_core("voice")
    sent = submit(core, options=RequestOptions(modalities=["text"]))
    assert [a.replica_id for a in of_type(sent, SendToReplica)] == ["echo-0"]
    first = output(core, text="a", token_ids=[1])
    last = output(core, seq=1, text=" b", token_ids=[2], finished=True)
    assert not of_type(first + last, SendToReplica)
    assert [a.output.text for a in of_type(first + last, Emit)] == ["a", " b"]
    (complete,) = of_type(last, Complete)
    assert "stage.voice.duration_s" not in complete.summary.metrics


def test_a_request_naming_no_modalities_runs_every_stage():
    core = make_core("voice")
    submit(core)
    forwarded = output(core, text="a", token_ids=[1], finished=True)
    assert [a.replica_id for a in of_type(forwarded, SendToReplica)] == ["voice-0"]
    assert not of_type(forwarded, Complete)
