"""The omni pipelines equal transformers' own `generate(..., return_audio=True)` on the tiny checkpoints.

Both sides are greedy: the thinker with `thinker_do_sample=False` / temperature 0, the talker with
`talker_do_sample=False` / temperature 0 (the talker's repetition penalty 1.05 and suppressed tokens
apply on both sides, and for Qwen3 the code predictor is greedy too). Token2wav's diffusion noise is
the first draw after `torch.manual_seed(0)` on the HF side and the request's seed 0 here.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import hf_reference, run_chain

from stages.protocol import SamplingParams, StageRequest

MESSAGES = [{"role": "user", "content": [{"type": "text", "text": "Hello, tell me a story."}]}]
N_TEXT, N_CODES = 10, 24
CHUNKS = {
    "qwen2_5_omni": {"first_chunk_size": 4, "async_chunk_size": 10},
    "qwen3_omni": {"first_chunk_size": 2, "async_chunk_size": 3},
}


def _close(ours: np.ndarray, theirs: np.ndarray) -> bool:
    scale = float(np.abs(theirs).max()) or 1.0
    return ours.shape == theirs.shape and np.allclose(ours, theirs, rtol=1e-4, atol=1e-5 * scale)


@pytest.fixture(scope="module")
def references(omni_models):
    return {family: hf_reference(family, omni_models[family], MESSAGES, N_TEXT, N_CODES) for family in omni_models}


@pytest.mark.parametrize("family", ["qwen2_5_omni", "qwen3_omni"])
def test_omni_offline_api_equals_transformers(omni_models, references, family):
    from stages.omni import Omni

    reference = references[family]
    deploy = {"stages": {"code2wav": {"first_chunk_size": 3, "async_chunk_size": 5}}}
    with Omni(omni_models[family], deploy=deploy) as omni:
        [result] = omni.generate(
            MESSAGES,
            {"temperature": 0, "max_tokens": N_TEXT, "stop_token_ids": [151645]},
            stage_sampling={"talker": {"temperature": 0, "max_tokens": N_CODES}},
        )
    assert result.token_ids == reference["tokens"]
    assert result.sample_rate == 24000
    assert _close(result.audio, reference["wav"]), np.abs(result.audio - reference["wav"]).max()
    for metric in ("ttft_s", "ttfp_s", "e2el_s"):
        assert metric in result.metrics


GRAPH_OPTIONS = {
    "eager": {"cuda_graphs": False},
    "uncaptured": {"cuda_graphs": "uncaptured", "prompt_graphs": "uncaptured"},
    "compiled": {"cuda_graphs": "uncaptured", "compile": True},
}


@pytest.mark.parametrize(
    ("family", "graphs"),
    [(family, graphs) for family in ("qwen2_5_omni", "qwen3_omni") for graphs in ("eager", "uncaptured")]
    + [("qwen2_5_omni", "compiled")],  # Qwen3-Omni's MoE stages run without graphs, so without compile
)
def test_omni_stage_chain_codes_equal_transformers(omni_models, references, family, graphs):
    """`graphs="uncaptured"` runs the AR stages' CUDA-graph decode step (static buffers, padded batch,
    the talker's embeddings buffer) and their prompt steps' bucket buffers eagerly, so their numerics
    are checked on CPU too; "compiled" runs
    it with the thinker's and the talker's decoder layers compiled by torch.compile (`options.compile`)."""
    reference = references[family]
    request = StageRequest(
        request_id="r0",
        messages=MESSAGES,
        sampling=SamplingParams(temperature=0, max_tokens=N_TEXT, stop_token_ids=[151645]),
    )
    talker = SamplingParams(temperature=0, max_tokens=N_CODES)
    # Small chunks force the code2wav stage to stream with left context rather than decode once
    # (Qwen2.5's token2wav runs a whole ODE per chunk, so its chunks are larger to keep the test quick).
    deploy = {**CHUNKS[family], "max_batch": 4, "options": GRAPH_OPTIONS[graphs]}
    [result] = run_chain(family, omni_models[family], [request], talker, deploy).values()
    assert result["tokens"] == reference["tokens"]
    assert result["codes"] == reference["codes"]
    assert len(result["codes"]) > 0
    assert _close(result["audio"], reference["wav"])


@pytest.mark.parametrize("family", ["qwen2_5_omni", "qwen3_omni"])
def test_a_request_arriving_mid_decode_leaves_both_equal_to_transformers(omni_models, references, family, monkeypatch):
    """The second request's prompts reach the thinker and the talker while the first decodes: those
    steps replay the decodes through the graph step, then the prompts through their bucket's static
    buffers (prompt graphs, uncaptured here)."""
    from stages.ar.model_runner import ModelRunner

    paths: list[tuple[str, str]] = []
    run = ModelRunner.run

    def recording_run(runner, batch):
        result = run(runner, batch)
        paths.append((type(runner.adapter).__name__, runner.last_path))
        return result

    monkeypatch.setattr(ModelRunner, "run", recording_run)
    reference = references[family]
    requests = [
        StageRequest(
            request_id=request_id,
            messages=MESSAGES,
            sampling=SamplingParams(temperature=0, max_tokens=N_TEXT, stop_token_ids=[151645]),
        )
        for request_id in ("first", "second")
    ]
    deploy = {**CHUNKS[family], "max_batch": 4, "options": GRAPH_OPTIONS["uncaptured"]}
    talker = SamplingParams(temperature=0, max_tokens=N_CODES)
    results = run_chain(family, omni_models[family], requests, talker, deploy, arrive_at={"second": 4})
    for result in results.values():
        assert result["tokens"] == reference["tokens"]
        assert result["codes"] == reference["codes"]
        assert _close(result["audio"], reference["wav"])
    split_in = {adapter for adapter, path in paths if path == "split-prompt"}
    assert len(split_in) == 2, paths  # the thinker's and the talker's


@pytest.mark.parametrize("family", ["qwen2_5_omni", "qwen3_omni"])
def test_prompts_in_several_replays_of_one_step_leave_all_equal_to_transformers(
    omni_models, references, family, monkeypatch
):
    """Prompt graphs that take one prompt each (`max_prompts` 1, as when many prompts need more tokens
    than the largest bucket): two requests arriving together, then two more while those decode, give
    thinker and talker steps of two replays each, whose outputs (logits, the thinker's hidden rows
    for the talker, the talker's last hidden state for its code predictor) are kept apart: each
    replay's outputs are overwritten by the next, as a captured graph's are."""
    from stages.ar.model_runner import ModelRunner
    from stages.ar.prompt_graphs import PromptGraphs

    replays, steps, last_outputs = [0], [], []
    run, replay, enable = ModelRunner.run, PromptGraphs.run, ModelRunner.enable_prompt_graphs

    def recording_run(runner, batch):
        replays[0] = 0
        result = run(runner, batch)
        steps.append((type(runner.adapter).__name__, runner.last_path, replays[0]))
        return result

    def counting_replay(graphs, *args, **kwargs):
        for tensor in last_outputs:  # as a captured graph's next replay overwrites its outputs
            tensor.fill_(float("nan"))
        replays[0] += 1
        out = replay(graphs, *args, **kwargs)
        last_outputs[:] = [t for t in (out.logits, out.last_hidden, *(out.hidden_states or ())) if t is not None]
        return out

    monkeypatch.setattr(ModelRunner, "run", recording_run)
    monkeypatch.setattr(PromptGraphs, "run", counting_replay)
    monkeypatch.setattr(
        ModelRunner, "enable_prompt_graphs", lambda runner, tokens, _, capture=True: enable(runner, tokens, 1, capture)
    )
    reference = references[family]
    sampling = SamplingParams(temperature=0, max_tokens=N_TEXT, stop_token_ids=[151645])
    requests = [StageRequest(request_id=rid, messages=MESSAGES, sampling=sampling) for rid in "abcd"]
    deploy = {**CHUNKS[family], "max_batch": 4, "options": GRAPH_OPTIONS["uncaptured"]}
    talker = SamplingParams(temperature=0, max_tokens=N_CODES)
    results = run_chain(family, omni_models[family], requests, talker, deploy, arrive_at={"c": 4, "d": 4})
    for request_id, result in results.items():
        assert result["tokens"] == reference["tokens"], request_id
        assert result["codes"] == reference["codes"], request_id
        assert _close(result["audio"], reference["wav"]), request_id
    for path in ("prompt", "split-prompt"):
        in_two = {adapter for adapter, step_path, count in steps if step_path == path and count == 2}
        assert len(in_two) == 2, (path, steps)  # the thinker's and the talker's


@pytest.mark.parametrize(("family", "with_image"), [("qwen2_5_omni", False), ("qwen3_omni", True)])
def test_omni_audio_image_prompt_equals_transformers(omni_models, family, with_image):
    """Qwen2.5-Omni is checked with audio only: transformers 5.19's own generate(return_audio=True) cannot
    take an image there (it forwards `pixel_values` to the talker's generate, which rejects them)."""
    from test_omni_streaming import _mm_request

    from stages.models.omni_inputs import split_messages

    request = _mm_request(440.0, 0, max_tokens=6, with_image=with_image)
    parts = split_messages(request.messages)
    media = {"audio": parts.audios, **({"images": parts.images} if with_image else {})}
    reference = hf_reference(family, omni_models[family], parts.conversation, 6, 8, **media)
    [result] = run_chain(family, omni_models[family], [request], SamplingParams(temperature=0, max_tokens=8)).values()
    assert result["tokens"] == reference["tokens"]
    assert result["codes"] == reference["codes"]
    assert _close(result["audio"], reference["wav"])
