"""Seeded tiny Qwen2-, Qwen3- and Llama-shaped LLMs with a locally trained tokenizer.

Every attention head is 64 wide (vLLM's CPU attention rejects smaller heads); two layers, two query
heads over one KV head (so grouped-query attention is exercised), fp32, seed 0. The vocabulary is the
tokenizer's (a few hundred BPE tokens plus ChatML specials), so the checkpoints are a few MB.
"""

from __future__ import annotations

from pathlib import Path

SEED = 0
INITIALIZER_RANGE = 0.05  # wider than HF's 0.02 so greedy argmaxes are not near-ties

_COMMON = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=64,
    max_position_embeddings=2048,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
    initializer_range=INITIALIZER_RANGE,
)


def build_qwen2(out_dir: str | Path) -> Path:
    from transformers import Qwen2Config

    return _build(out_dir, Qwen2Config, rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0})


def build_qwen3(out_dir: str | Path) -> Path:
    from transformers import Qwen3Config

    return _build(out_dir, Qwen3Config, rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0})


def build_llama(out_dir: str | Path) -> Path:
    from transformers import LlamaConfig

    return _build(out_dir, LlamaConfig, rope_parameters={"rope_type": "default", "rope_theta": 500_000.0})


def _build(out_dir: str | Path, config_class, **overrides) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    from stages.tiny.tokenizer import build_tokenizer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(out)
    special_ids = {
        "bos_token_id": tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    config = config_class(vocab_size=len(tokenizer), **_COMMON, **special_ids, **overrides)
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(
        bos_token_id=special_ids["bos_token_id"],
        eos_token_id=[tokenizer.eos_token_id, special_ids["bos_token_id"]],
        pad_token_id=special_ids["pad_token_id"],
        do_sample=False,
    )
    model.save_pretrained(str(out))
    return out
