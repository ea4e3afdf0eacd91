"""Autoregressive stage engines.

`ARTorchEngine` (stages/ar/torch_engine.py) is our continuous-batching engine over unmodified
transformers models: sequence -> scheduler -> block manager / KV cache -> model runner -> sampler,
with paged attention registered through transformers' `AttentionInterface`. `VLLMEngine`
(stages/ar/vllm_engine.py) runs text stages on vLLM. Importing this package imports no torch.
"""

from __future__ import annotations

__all__ = ["ARTorchEngine"]


def __getattr__(name: str):
    if name == "ARTorchEngine":
        from stages.ar.torch_engine import ARTorchEngine

        return ARTorchEngine
    raise AttributeError(f"module 'stages.ar' has no attribute {name!r}")
