"""What omni stages need from the torch engine: hidden states, inputs_embeds prompts, and requests
that wait for input chunks. Each is checked against transformers or against the plain token path."""

from __future__ import annotations

import random

import pytest
import torch

from stages.ar import ARTorchEngine
from stages.config import StageDeployConfig
from stages.protocol import RequestOptions, SamplingParams, StageRequest
from stages.tensors import from_wire, to_wire

GREEDY = SamplingParams(temperature=0.0, max_tokens=8)


def prompt_of(length: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(400) for _ in range(length)]


@pytest.fixture(scope="module")
def engine(tiny_llms):
    return ARTorchEngine.from_pretrained(tiny_llms["qwen3"], StageDeployConfig(prefill_chunk=5))


@pytest.fixture(scope="module")
def hf(hf_models):
    return hf_models("qwen3")


def test_hidden_states_equal_transformers_output_hidden_states(engine, hf, helpers):
    prompt, layers = prompt_of(13), [0, -1, 1]
    with torch.no_grad():
        reference = hf.generate(
            torch.tensor([prompt]),
            max_new_tokens=8,
            do_sample=False,
            output_hidden_states=True,
            return_dict_in_generate=True,
        )
    expected = torch.stack([torch.cat([step[layer][0] for step in reference.hidden_states]) for layer in layers])

    other = StageRequest(request_id="plain", prompt_token_ids=prompt_of(9, seed=1), sampling=GREEDY)
    wanted = StageRequest(
        request_id="h",
        prompt_token_ids=prompt,
        sampling=GREEDY,
        options=RequestOptions(extra={"hidden_layers": layers}),
    )
    results = helpers.run_engine(engine, {0: [other], 1: [wanted]})

    pieces = [o for o in results["h"].outputs if "hidden" in o.payloads]
    starts = [o.params["hidden_start"] for o in pieces]
    rows = torch.cat([from_wire(o.payloads["hidden"]) for o in pieces], dim=1)
    assert results["h"].token_ids == reference.sequences[0, len(prompt) :].tolist()
    assert starts[0] == 0 and starts == sorted(starts)
    assert pieces[0].params["hidden_layers"] == layers
    assert rows.shape == expected.shape
    torch.testing.assert_close(rows, expected, rtol=1e-4, atol=1e-5)
    assert all("hidden" not in o.payloads for o in results["plain"].outputs)


def test_inputs_embeds_prompt_gives_the_same_tokens_as_token_ids(engine, hf, helpers):
    prompt = prompt_of(17, seed=2)
    with torch.no_grad():
        embeds = hf.get_input_embeddings()(torch.tensor(prompt))
    by_ids = StageRequest(request_id="ids", prompt_token_ids=prompt, sampling=GREEDY)
    by_embeds = StageRequest(request_id="emb", inputs_embeds=to_wire(embeds), sampling=GREEDY)
    results = helpers.run_engine(engine, {0: [by_ids], 2: [by_embeds]})
    assert results["emb"].token_ids == results["ids"].token_ids
    assert results["ids"].token_ids == helpers.hf_greedy(hf, prompt, 8)


def test_inputs_embeds_with_wrong_width_is_invalid(engine):
    from stages.errors import InvalidRequest

    with pytest.raises(InvalidRequest) as error:
        engine.add_request(StageRequest(request_id="w", inputs_embeds=to_wire(torch.zeros(3, 7))))
    assert error.value.param == "inputs_embeds"


def test_chunked_input_waits_and_gives_the_same_tokens_as_the_whole_prompt(engine, hf, helpers):
    prompt = prompt_of(20, seed=3)
    with torch.no_grad():
        tail_embeds = hf.get_input_embeddings()(torch.tensor(prompt[12:]))
    whole = helpers.run_engine(
        engine, {0: [StageRequest(request_id="whole", prompt_token_ids=prompt, sampling=GREEDY)]}
    )

    engine.add_request(
        StageRequest(request_id="c", prompt_token_ids=prompt[:4], sampling=GREEDY, finished=False, params={})
    )
    for _ in range(4):
        assert engine.step() == []  # consumes its input, then waits
        assert engine.has_unfinished()
    seq = engine.sequences["c"]
    assert seq.num_computed_tokens == 3  # the last known token waits for the rest of the input
    engine.add_chunk(StageRequest(request_id="c", seq=1, prompt_token_ids=prompt[4:12], finished=False))
    engine.step()
    engine.step()
    assert engine.step() == []
    engine.add_chunk(StageRequest(request_id="c", seq=2, inputs_embeds=to_wire(tail_embeds), finished=True))
    chunked = helpers.run_engine(engine, {})
    assert chunked["c"].token_ids == whole["whole"].token_ids


def test_chunked_input_with_nothing_in_the_first_chunk(engine, helpers):
    prompt = prompt_of(6, seed=4)
    engine.add_request(StageRequest(request_id="late", sampling=GREEDY, finished=False))
    assert engine.step() == [] and engine.has_unfinished()
    engine.add_chunk(StageRequest(request_id="late", seq=1, prompt_token_ids=prompt, finished=True))
    late = helpers.run_engine(engine, {})
    whole = helpers.run_engine(engine, {0: [StageRequest(request_id="w", prompt_token_ids=prompt, sampling=GREEDY)]})
    assert late["late"].token_ids == whole["w"].token_ids


def test_hidden_states_through_the_graph_decode_buffers(tiny_llms, hf, helpers):
    """Decode batches through the CUDA-graph step's static buffers (uncaptured on CPU) keep hidden states."""
    engine = ARTorchEngine.from_pretrained(
        tiny_llms["qwen3"], StageDeployConfig(max_batch=4, options={"cuda_graphs": "uncaptured"})
    )
    prompt = prompt_of(9, seed=5)
    with torch.no_grad():
        reference = hf.generate(
            torch.tensor([prompt]),
            max_new_tokens=6,
            do_sample=False,
            output_hidden_states=True,
            return_dict_in_generate=True,
        )
    expected = torch.cat([step[-1][0] for step in reference.hidden_states])
    request = StageRequest(
        request_id="g",
        prompt_token_ids=prompt,
        sampling=SamplingParams(temperature=0.0, max_tokens=6),
        options=RequestOptions(extra={"hidden_layers": -1}),
    )
    results = helpers.run_engine(engine, {0: [request]})
    rows = torch.cat([from_wire(o.payloads["hidden"])[0] for o in results["g"].outputs if "hidden" in o.payloads])
    assert results["g"].token_ids == reference.sequences[0, len(prompt) :].tolist()
    torch.testing.assert_close(rows, expected, rtol=1e-4, atol=1e-5)


def test_inputs_embeds_prompt_decodes_through_the_graph_buffers(tiny_llms, hf, helpers):
    engine = ARTorchEngine.from_pretrained(
        tiny_llms["qwen3"], StageDeployConfig(max_batch=4, options={"cuda_graphs": "uncaptured"})
    )
    prompt = prompt_of(11, seed=6)
    with torch.no_grad():
        embeds = hf.get_input_embeddings()(torch.tensor(prompt))
    by_embeds = StageRequest(request_id="emb", inputs_embeds=to_wire(embeds), sampling=GREEDY)
    results = helpers.run_engine(engine, {0: [by_embeds]})
    assert results["emb"].token_ids == helpers.hf_greedy(hf, prompt, 8)
