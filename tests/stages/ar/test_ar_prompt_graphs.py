"""`options.prompt_graphs`: prompts from their first token run through the static buffers of their
token bucket (on CUDA, a captured graph; "uncaptured" runs the same buffers eagerly, so the padding,
the packing of several prompts, their masks and the logits rows are checked here).

A prompt that arrives alone has such a step first; the tokens must equal transformers'. A prompt
longer than the step's budget (64 tokens here) computes its first chunk through the bucket of 64 and
the rest eagerly. Prompts that arrive together share one bucket, each still equal to transformers;
more than one bucket holds replay in groups. Beside decodes (`test_ar_split_steps.py`) the prompts
run after the decodes' graph."""

from __future__ import annotations

import pytest

from stages.ar import ARTorchEngine
from stages.config import StageDeployConfig
from stages.errors import ConfigError
from stages.protocol import SamplingParams, StageRequest

PROMPT_LENGTHS = [2, 5, 16, 17, 40, 64, 70]  # one token is single-token work: the decode path
MAX_NEW_TOKENS = 8


def engine_for(path, **options) -> ARTorchEngine:
    deploy = StageDeployConfig(max_batch=4, prefill_chunk=64, options={"prompt_graphs": "uncaptured", **options})
    return ARTorchEngine.from_pretrained(path, deploy)


def record_paths(engine) -> list[str]:
    paths, run = [], engine.runner.run

    def recording(batch):
        result = run(batch)
        paths.append(engine.runner.last_path)
        return result

    engine.runner.run = recording
    return paths


@pytest.mark.parametrize("arch", ["qwen2", "qwen3", "llama"])
def test_prompts_alone_run_their_bucket_and_keep_the_tokens(arch, tiny_llms, hf_models, helpers):
    import random

    engine = engine_for(tiny_llms[arch])
    paths = record_paths(engine)
    rng = random.Random(7)
    sampling = SamplingParams(temperature=0.0, max_tokens=MAX_NEW_TOKENS, ignore_eos=True)
    for length in PROMPT_LENGTHS:
        prompt = [rng.randrange(engine.vocab_size) for _ in range(length)]
        request = StageRequest(request_id=f"p{length}", prompt_token_ids=prompt, sampling=sampling)
        paths.clear()
        [result] = helpers.run_engine(engine, {0: [request]}).values()

        assert result.token_ids == helpers.hf_greedy(hf_models(arch), prompt, MAX_NEW_TOKENS), f"{length} tokens"
        assert paths[0] == "prompt", (length, paths)
        assert "prompt" not in paths[1:], (length, paths)  # the rest of a long prompt, then decodes
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks - 1


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_prompts_arriving_together_share_a_bucket(arch, tiny_llms, hf_models, helpers):
    import random

    engine = engine_for(tiny_llms[arch])
    paths = record_paths(engine)
    rng = random.Random(11)
    sampling = SamplingParams(temperature=0.0, max_tokens=MAX_NEW_TOKENS, ignore_eos=True)
    prompts = {f"p{length}": [rng.randrange(engine.vocab_size) for _ in range(length)] for length in (5, 17, 2, 40)}
    requests = [StageRequest(request_id=rid, prompt_token_ids=p, sampling=sampling) for rid, p in prompts.items()]
    results = helpers.run_engine(engine, {0: requests})

    assert paths[0] == "prompt"  # 64 tokens, four prompts, one bucket
    for request_id, prompt in prompts.items():
        assert results[request_id].token_ids == helpers.hf_greedy(hf_models(arch), prompt, MAX_NEW_TOKENS), request_id


@pytest.mark.parametrize("arrive_mid_decode", [False, True])
def test_prompts_beyond_the_largest_bucket_replay_in_groups(
    arrive_mid_decode, tiny_llms, hf_models, helpers, monkeypatch
):
    """A step whose prompts together exceed the largest bucket (32 tokens here, 64 scheduled) replays
    consecutive groups that fit: 20 | 17 + 2 | 25 tokens, three replays, alone or after a decode."""
    import random

    from stages.ar import prompt_graphs

    monkeypatch.setattr(prompt_graphs, "LARGEST_BUCKET", 32)
    engine = engine_for(tiny_llms["qwen2"], cuda_graphs="uncaptured")
    paths, replays = record_paths(engine), []
    run = engine.runner.prompt_graphs.run
    engine.runner.prompt_graphs.run = lambda token_ids, *args: replays.append(len(token_ids)) or run(token_ids, *args)
    rng = random.Random(13)
    sampling = SamplingParams(temperature=0.0, max_tokens=MAX_NEW_TOKENS, ignore_eos=True)
    prompts = {f"p{length}": [rng.randrange(engine.vocab_size) for _ in range(length)] for length in (20, 17, 2, 25)}
    requests = [StageRequest(request_id=rid, prompt_token_ids=p, sampling=sampling) for rid, p in prompts.items()]
    arrivals = {0: requests}
    if arrive_mid_decode:  # the first request decodes while the other three arrive together
        arrivals = {0: requests[:1], 2: requests[1:]}
    results = helpers.run_engine(engine, arrivals)

    grouped = [17 + 2, 25] if arrive_mid_decode else [20, 17 + 2, 25]
    assert replays[-len(grouped) :] == grouped, replays
    assert ("split-prompt" if arrive_mid_decode else "prompt") in paths
    for request_id, prompt in prompts.items():
        assert results[request_id].token_ids == helpers.hf_greedy(hf_models("qwen2"), prompt, MAX_NEW_TOKENS), (
            request_id
        )


def test_without_decode_graphs_a_prompt_beside_a_decode_runs_eagerly(tiny_llms, helpers):
    engine = engine_for(tiny_llms["qwen2"], cuda_graphs=False)
    paths = record_paths(engine)
    sampling = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    first = StageRequest(request_id="a", prompt_token_ids=[3, 4, 5], sampling=sampling)
    second = StageRequest(request_id="b", prompt_token_ids=[6, 7, 8, 9], sampling=sampling)
    helpers.run_engine(engine, {0: [first], 1: [second]})

    assert paths[:2] == ["prompt", "eager"]


def test_prompt_graphs_option_is_checked(tiny_llms):
    with pytest.raises(ConfigError) as error:
        engine_for(tiny_llms["qwen2"], prompt_graphs="yes")
    assert error.value.field == "options.prompt_graphs"
