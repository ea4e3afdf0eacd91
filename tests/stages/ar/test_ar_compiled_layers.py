"""`options.compile`: the decode step's decoder layers share one torch.compile'd graph per batch size.

Compiling layer by layer would cost a compilation per layer and per batch shape; the layers of a
model are interchangeable to Dynamo (their caches are bound to their modules), so a six-layer
model compiles as often as a one-layer one: once per graph batch size it runs. The tokens must not change (the oracle test compares
the compiled step with transformers for each architecture)."""

from __future__ import annotations

import pytest

from stages.config import StageDeployConfig
from stages.errors import ConfigError
from stages.protocol import SamplingParams, StageRequest

LAYERS = 6


def deep_engine(compile_step):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from stages.ar import ARTorchEngine
    from stages.ar.attention import use_paged_attention
    from stages.ar.model_adapter import CausalLMAdapter

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=LAYERS,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        initializer_range=0.05,
    )
    model = Qwen2ForCausalLM(config).eval()
    use_paged_attention(model.model)
    deploy = StageDeployConfig(max_batch=4, options={"cuda_graphs": "uncaptured", "compile": compile_step})
    return ARTorchEngine(CausalLMAdapter(model), None, deploy)


def generate(engine, helpers) -> dict[str, list[int]]:
    sampling = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    prompts = {"alone": [5, 6, 7]}, {"a": [1, 2], "b": list(range(30, 50)), "c": [9] * 7}
    results = {}
    for step_prompts in prompts:  # one decode alone, then three together: two batch shapes
        arrivals = {
            0: [StageRequest(request_id=rid, prompt_token_ids=p, sampling=sampling) for rid, p in step_prompts.items()]
        }
        results.update({rid: done.token_ids for rid, done in helpers.run_engine(engine, arrivals).items()})
    return results


def test_compiled_decode_layers_share_one_graph_and_keep_the_tokens(helpers):
    import torch
    from torch._dynamo.utils import counters

    eager = generate(deep_engine(False), helpers)
    torch._dynamo.reset()  # no graph compiled by an earlier test for the same layer shapes
    graphs_before = counters["stats"]["unique_graphs"]
    engine = deep_engine(True)
    compiled = generate(engine, helpers)

    assert compiled == eager
    assert len(engine.runner.graphs.compiled.layers) == LAYERS
    compilations = counters["stats"]["unique_graphs"] - graphs_before
    assert compilations == 2, compilations  # one per graph batch size (1 and 4), not per layer


def test_compile_option_must_be_a_boolean():
    with pytest.raises(ConfigError) as error:
        deep_engine("yes")
    assert error.value.field == "options.compile"
