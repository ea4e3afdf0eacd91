"""The Qwen3-Omni code predictor engine (`stages.models.qwen3_code_predictor`) against transformers'
`code_predictor.generate`, and its per-request seeded sampling.

The predictor is built from the tiny Qwen3-Omni talker config with seeded random weights (two copies:
transformers' and ours, whose attention is switched to the paged one and whose projections are merged).
Greedy residual codes and the frame embeddings they sum to must equal transformers' (eager and
compiled, with and without attention biases); sampled codes must depend only on the request's seed and
frame index (not on its batch), and follow the top-k filter.
"""

from __future__ import annotations

import copy

import pytest
from conftest import run_chain

BATCH = 5


@pytest.fixture(scope="module")
def predictors():
    return _predictors()


def _predictors(attention_bias: bool = False):
    import torch
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (
        Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration as Predictor,
    )

    from stages.tiny.qwen_omni import qwen3_omni_config

    config = qwen3_omni_config().talker_config.code_predictor_config
    config.num_hidden_layers = 2
    config.layer_types = ["full_attention"] * 2
    config.attention_bias = attention_bias
    torch.manual_seed(0)
    reference = Predictor(config).eval()
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.copy_(torch.randn(parameter.shape) * 0.2)
    return reference, copy.deepcopy(reference)


def _inputs(width: int, count: int = BATCH, seed: int = 0):
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randn(count, width, generator=generator), torch.randn(count, width, generator=generator)


def _engine(module, max_batch=8, compile=False):
    from stages.models.qwen3_code_predictor import CodePredictor

    return CodePredictor(module, max_batch=max_batch, device="cpu", compile=compile)


def test_greedy_codes_and_frame_embeddings_equal_transformers(predictors):
    reference, ours = predictors
    _assert_greedy_equal_to_transformers(reference, _engine(ours))


def test_merged_projections_with_attention_biases_equal_transformers():
    reference, ours = _predictors(attention_bias=True)
    engine = _engine(ours)
    assert ours.model.layers[0].self_attn.qkv_bias is not None
    _assert_greedy_equal_to_transformers(reference, engine)


def test_the_compiled_layer_equals_transformers_with_one_graph_per_shape(predictors):
    """`compile` compiles the layer forward once per shape, not once per layer: a batch of 5 runs
    at bucket 8, whose prefill ([1, 16] tokens) and decode ([1, 8]) are the two graphs for both layers."""
    import torch
    from torch._dynamo.utils import counters

    reference, ours = predictors
    torch._dynamo.reset()
    counters.clear()
    _assert_greedy_equal_to_transformers(reference, _engine(ours, compile=True))
    assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])
    assert not counters["graph_break"], dict(counters["graph_break"])


def test_the_modules_weights_are_views_into_the_merged_projections(predictors):
    """After construction the q/k/v and gate/up weights live in the merged tensors (no second copy),
    in order, and transformers' modules compute with them unchanged."""
    import torch

    _, ours = predictors
    _engine(ours)
    for layer in ours.model.layers:
        attention, mlp = layer.self_attn, layer.mlp
        for merged, linears in (
            (attention.qkv_weight, [attention.q_proj, attention.k_proj, attention.v_proj]),
            (mlp.gate_up_weight, [mlp.gate_proj, mlp.up_proj]),
        ):
            offset = 0
            for linear in linears:
                assert linear.weight.untyped_storage().data_ptr() == merged.untyped_storage().data_ptr()
                assert linear.weight.data_ptr() == merged.data_ptr() + offset * merged.stride(0) * merged.element_size()
                offset += linear.out_features
            assert offset == merged.shape[0]
            assert torch.equal(torch.cat([linear.weight for linear in linears]), merged)
        x = torch.randn(3, ours.config.hidden_size)
        assert torch.allclose(
            torch.cat([attention.q_proj(x), attention.k_proj(x), attention.v_proj(x)], dim=-1),
            x @ attention.qkv_weight.T,
        )


def _assert_greedy_equal_to_transformers(reference, engine):
    import torch

    hidden, code0 = _inputs(reference.config.hidden_size)
    with torch.no_grad():
        result = reference.generate(
            inputs_embeds=torch.stack([hidden, code0], dim=1),
            max_new_tokens=reference.config.num_code_groups - 1,
            do_sample=False,
            output_hidden_states=True,
            return_dict_in_generate=True,
        )
        expected_codes = result.sequences
        mids = [step[0] for step in result.hidden_states[1:]]
        last = reference.get_input_embeddings()[-1](expected_codes[..., -1:])
        expected_frames = torch.cat([code0[:, None], *mids, last], dim=1).sum(1)
    codes, frames = engine.run(hidden, code0, seeds=[0] * BATCH, frames=[0] * BATCH, greedy=[True] * BATCH)
    assert codes.tolist() == expected_codes.tolist()
    assert torch.allclose(frames, expected_frames, rtol=1e-5, atol=1e-6)


def test_batches_larger_than_the_largest_graph_run_in_parts(predictors):
    import torch

    _, ours = predictors
    engine = _engine(ours, max_batch=2)
    hidden, code0 = _inputs(ours.config.hidden_size)
    whole_codes, whole_frames = _engine(ours).run(hidden, code0, [0] * BATCH, [0] * BATCH, [True] * BATCH)
    codes, frames = engine.run(hidden, code0, [0] * BATCH, [0] * BATCH, [True] * BATCH)
    assert torch.equal(codes, whole_codes)
    assert torch.allclose(frames, whole_frames, rtol=1e-5, atol=1e-6)


def test_sampled_codes_depend_on_the_seed_and_frame_only(predictors):
    """A request's sampled codes are the same whatever else shares its batch (and wherever its row is);
    another seed or another frame index draws other codes."""
    _, ours = predictors
    engine = _engine(ours)
    hidden, code0 = _inputs(ours.config.hidden_size)
    seeds, frames = [11, 12, 13, 14, 15], [0, 3, 3, 7, 9]
    codes = engine.run(hidden, code0, seeds, frames, [False] * BATCH)[0].tolist()
    alone = engine.run(hidden[2:3], code0[2:3], seeds[2:3], frames[2:3], [False])[0].tolist()
    assert alone[0] == codes[2]
    flipped = engine.run(hidden.flip(0), code0.flip(0), seeds[::-1], frames[::-1], [False] * BATCH)[0].tolist()
    assert flipped[::-1] == codes
    other_seed = engine.run(hidden[2:3], code0[2:3], [99], frames[2:3], [False])[0].tolist()
    other_frame = engine.run(hidden[2:3], code0[2:3], seeds[2:3], [4], [False])[0].tolist()
    assert other_seed[0] != codes[2] and other_frame[0] != codes[2]
    greedy = engine.run(hidden[2:3], code0[2:3], seeds[2:3], frames[2:3], [True])[0].tolist()
    assert greedy[0] != codes[2]


def test_a_mixed_batch_keeps_greedy_rows_greedy(predictors):
    _, ours = predictors
    engine = _engine(ours)
    hidden, code0 = _inputs(ours.config.hidden_size)
    greedy_codes = engine.run(hidden, code0, [0] * BATCH, [0] * BATCH, [True] * BATCH)[0].tolist()
    mixed = engine.run(hidden, code0, [1] * BATCH, [0] * BATCH, [True, False, True, False, True])[0].tolist()
    assert [mixed[i] for i in (0, 2, 4)] == [greedy_codes[i] for i in (0, 2, 4)]


def test_sampled_codes_come_from_the_top_k_and_follow_the_distribution():
    """The Gumbel-max draw over the filtered logits: only top-k candidates are drawn, and over many
    keys each candidate's frequency follows its softmax probability."""
    import torch

    from stages.models.qwen3_code_predictor import TOP_K, gumbel_noise

    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    keys = torch.stack([torch.arange(4000), torch.zeros(4000, dtype=torch.long)], dim=1)
    candidates = torch.arange(4).expand(4000, 4)
    draws = (logits + gumbel_noise(keys, 0, candidates)).argmax(-1)
    frequencies = torch.bincount(draws, minlength=4).float() / 4000
    assert torch.allclose(frequencies, logits.softmax(-1)[0], atol=0.03)
    assert TOP_K == 50


def test_the_per_frame_noise_table_is_the_per_step_noise():
    """A sampled frame hashes its noise once for every step and code; each step reads the same values
    the per-candidate hash gives."""
    import torch

    from stages.models.qwen3_code_predictor import gumbel_noise, gumbel_table

    keys = torch.tensor([[2**62 + 5, 0], [7, 123], [0, 2**31]])
    table = gumbel_table(keys, 15, 300)
    candidates = torch.randint(0, 300, (3, 50), generator=torch.Generator().manual_seed(0))
    for step in (0, 7, 14):
        assert torch.equal(table[:, step].gather(1, candidates), gumbel_noise(keys, step, candidates))


def test_the_same_seed_gives_the_same_audio(omni_models):
    """Through the whole Qwen3-Omni chain with a sampling talker: a request's codes (code 0 from the talker,
    residuals from the predictor) and audio follow its seed alone, batched with another request or not
    (that another seed draws other codes is `test_sampled_codes_depend_on_the_seed_and_frame_only`)."""
    import numpy as np

    from stages.protocol import SamplingParams, StageRequest

    def request(name):
        return StageRequest(
            request_id=name,
            messages=[{"role": "user", "content": [{"type": "text", "text": "Hello, tell me a story."}]}],
            sampling=SamplingParams(temperature=0, max_tokens=6, stop_token_ids=[151645]),
        )

    def run(names, seed):
        talker = SamplingParams(temperature=0.9, top_k=50, max_tokens=12, min_tokens=12, seed=seed)
        deploy = {"first_chunk_size": 3, "async_chunk_size": 4, "max_batch": 4}
        return run_chain("qwen3_omni", omni_models["qwen3_omni"], [request(n) for n in names], talker, deploy)

    together = run(["a", "b"], seed=7)
    alone = run(["a"], seed=7)["a"]
    assert len(alone["codes"]) == 11  # the last code 0 gets no residuals: it leaves no frame
    assert together["a"]["codes"] == together["b"]["codes"] == alone["codes"]
    assert np.allclose(together["a"]["audio"], alone["audio"], rtol=1e-5, atol=1e-6 * np.abs(alone["audio"]).max())
