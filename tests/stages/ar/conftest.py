"""Shared fixtures of the AR engine tests: tiny checkpoints built once per session, and helpers that
drive an engine to completion and compute transformers' own greedy reference."""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field

import pytest

ARCHITECTURES = ["qwen2", "qwen3", "llama"]


@pytest.fixture(scope="session", autouse=True)
def _few_threads():
    import torch

    torch.set_num_threads(int(os.environ.get("OMNISTAGE_TEST_THREADS", "1")))


@pytest.fixture(scope="session")
def tiny_llms(tmp_path_factory) -> dict:
    from stages.tiny import build_all

    return build_all(tmp_path_factory.mktemp("ar_tiny_models"), only=ARCHITECTURES)


@dataclass
class Finished:
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    deltas: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    outputs: list = field(default_factory=list)


def run_engine(engine, arrivals, max_steps: int = 10_000, on_step=None) -> dict[str, Finished]:
    """Step `engine` until idle; `arrivals` maps a step number to the requests added before it."""
    results: dict[str, Finished] = defaultdict(Finished)
    last_arrival = max(arrivals, default=0)
    for step in range(max_steps):
        for request in arrivals.get(step, []):
            engine.add_request(request)
        if on_step:
            on_step(step, engine)
        if step > last_arrival and not engine.has_unfinished():
            return dict(results)
        for output in engine.step():
            result = results[output.request_id]
            assert output.error is None, output.error
            result.token_ids += output.token_ids
            result.text += output.text
            result.deltas.append(output.text)
            result.outputs.append(output)
            if output.finished:
                result.finish_reason = output.finish_reason
    raise AssertionError("the engine did not finish")


@pytest.fixture(scope="session")
def hf_models(tiny_llms):
    """transformers' own model per architecture (float32, sdpa), loaded once."""
    from transformers import AutoModelForCausalLM

    cache = {}

    def load(name: str):
        if name not in cache:
            cache[name] = AutoModelForCausalLM.from_pretrained(str(tiny_llms[name])).eval()
        return cache[name]

    return load


def hf_greedy(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    import torch

    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False)
    return out[0, len(prompt) :].tolist()


@pytest.fixture(scope="session")
def helpers():
    return type("Helpers", (), {"run_engine": staticmethod(run_engine), "hf_greedy": staticmethod(hf_greedy)})
