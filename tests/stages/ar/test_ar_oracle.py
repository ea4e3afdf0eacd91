"""Greedy tokens of the torch engine equal transformers' `generate` on the same tiny checkpoint.

Eight prompts of different lengths arrive at different steps; the engine batches them
continuously. Variants force chunked prefill with a tiny per-step budget, and a KV cache small
enough that sequences are preempted and recomputed, and two run decode batches through the CUDA-graph
step's padded static buffers (uncaptured, so it runs on CPU), one of them with the step's decoder
layers compiled by torch.compile (Inductor's CPU code).
"""

from __future__ import annotations

import random

import pytest

from stages.ar import ARTorchEngine
from stages.config import StageDeployConfig
from stages.protocol import SamplingParams, StageRequest

PROMPT_LENGTHS = [1, 5, 12, 23, 31, 40, 57, 70]
MAX_NEW_TOKENS = 20
ARRIVAL_STEPS = [0, 0, 1, 3, 4, 4, 9, 15]

SCENARIOS = {
    "continuous": dict(prefill_chunk=512),
    "chunked_prefill": dict(prefill_chunk=7),
    "preemption": dict(prefill_chunk=64, options={"num_kv_blocks": 12}),
    "graph_decode_buffers": dict(max_batch=8, options={"cuda_graphs": "uncaptured"}),
    # graph batches 1, 2 and 4 (a compilation each): 8 would add a fourth for no new code path
    "compiled_graph_decode": dict(max_batch=4, options={"cuda_graphs": "uncaptured", "compile": True}),
}


def prompts(vocab_size: int) -> list[list[int]]:
    rng = random.Random(1234)
    return [[rng.randrange(vocab_size) for _ in range(n)] for n in PROMPT_LENGTHS]


@pytest.fixture(scope="module")
def references(hf_models, helpers):
    cache = {}

    def of(name: str) -> list[list[int]]:
        if name not in cache:
            model = hf_models(name)
            cache[name] = [helpers.hf_greedy(model, p, MAX_NEW_TOKENS) for p in prompts(model.config.vocab_size)]
        return cache[name]

    return of


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("arch", ["qwen2", "qwen3", "llama"])
def test_greedy_tokens_equal_transformers(arch, scenario, tiny_llms, references, helpers):
    engine = ARTorchEngine.from_pretrained(tiny_llms[arch], StageDeployConfig(**SCENARIOS[scenario]))
    expected = references(arch)
    arrivals: dict[int, list[StageRequest]] = {}
    for index, (prompt, step) in enumerate(zip(prompts(engine.vocab_size), ARRIVAL_STEPS, strict=True)):
        sampling = SamplingParams(temperature=0.0, max_tokens=MAX_NEW_TOKENS)
        arrivals.setdefault(step, []).append(
            StageRequest(request_id=f"r{index}", prompt_token_ids=prompt, sampling=sampling)
        )
    results = helpers.run_engine(engine, arrivals)

    for index, tokens in enumerate(expected):
        result = results[f"r{index}"]
        assert result.token_ids == tokens, f"request r{index} (prompt of {PROMPT_LENGTHS[index]} tokens)"
        stopped = tokens[-1] in engine.eos_token_ids
        assert result.finish_reason == ("stop" if stopped else "length")
    if scenario == "preemption":
        assert engine.scheduler.num_preemptions > 0
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks - 1
