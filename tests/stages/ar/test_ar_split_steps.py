"""A step that admits a prompt while others decode runs in two forwards: the decodes through the
graph step (its static buffers, uncaptured on CPU), then the prompt chunks, eagerly or, with prompt
graphs, through their bucket's static buffers (a prompt of embeddings on a model that embeds its own
tokens stays eager). Both requests' tokens and hidden states equal transformers', whether the
newcomer's prompt is token ids or embeddings."""

from __future__ import annotations

import random

import pytest
import torch

from stages.ar import ARTorchEngine
from stages.config import StageDeployConfig
from stages.protocol import RequestOptions, SamplingParams, StageRequest
from stages.tensors import from_wire, to_wire

MAX_TOKENS = 6


def prompt_of(length: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(400) for _ in range(length)]


def reference(hf, prompt: list[int]) -> tuple[list[int], torch.Tensor]:
    with torch.no_grad():
        out = hf.generate(
            torch.tensor([prompt]),
            max_new_tokens=MAX_TOKENS,
            do_sample=False,
            output_hidden_states=True,
            return_dict_in_generate=True,
        )
    hidden = torch.cat([step[-1][0] for step in out.hidden_states])
    return out.sequences[0, len(prompt) :].tolist(), hidden


def request(request_id: str, prompt: list[int], hf, as_embeds: bool) -> StageRequest:
    fields = {"prompt_token_ids": prompt}
    if as_embeds:
        with torch.no_grad():
            fields = {"inputs_embeds": to_wire(hf.get_input_embeddings()(torch.tensor(prompt)))}
    return StageRequest(
        request_id=request_id,
        sampling=SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS),
        options=RequestOptions(extra={"hidden_layers": -1}),
        **fields,
    )


@pytest.mark.parametrize("prompt_graphs", [False, "uncaptured"], ids=["eager_prompts", "prompt_graphs"])
@pytest.mark.parametrize("as_embeds", [False, True], ids=["token_ids", "inputs_embeds"])
def test_decodes_replay_beside_a_prompt(tiny_llms, hf_models, helpers, as_embeds, prompt_graphs):
    hf = hf_models("qwen3")
    options = {"cuda_graphs": "uncaptured", "prompt_graphs": prompt_graphs}
    engine = ARTorchEngine.from_pretrained(tiny_llms["qwen3"], StageDeployConfig(max_batch=4, options=options))
    paths = []
    run = engine.runner.run

    def recording_run(batch):
        result = run(batch)
        paths.append(engine.runner.last_path)
        return result

    engine.runner.run = recording_run
    early, late = prompt_of(9, seed=5), prompt_of(13, seed=6)
    arrivals = {0: [request("early", early, hf, False)], 2: [request("late", late, hf, as_embeds)]}
    results = helpers.run_engine(engine, arrivals)

    if prompt_graphs:
        assert paths[:4] == ["prompt", "graph", "split" if as_embeds else "split-prompt", "graph"]
    else:
        assert paths[:4] == ["eager", "graph", "split", "graph"]
    for request_id, prompt in (("early", early), ("late", late)):
        tokens, hidden = reference(hf, prompt)
        outputs = results[request_id].outputs
        rows = torch.cat([from_wire(o.payloads["hidden"])[0] for o in outputs if "hidden" in o.payloads])
        assert results[request_id].token_ids == tokens
        torch.testing.assert_close(rows, hidden, rtol=1e-4, atol=1e-5)
