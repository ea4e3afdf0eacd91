"""Regional compilation of the decode step: one compiled decoder layer, shared by every layer.

`torch.compile` over a whole decode step traces and lowers every layer on its own: for 24 layers
of the Qwen2.5-Omni talker's shapes that took 190 s on a 2-core CPU against 18 s for one shared
layer (`benchmarks/decode_compile.py`), and it did not finish within a device call for the 7B
thinker on the H200. The layers of one model run the same code on weights of the same shapes, so
here each layer's forward is compiled (Inductor fuses its norms, rotary embedding, residual adds
and activation into few kernels) and all of them hit the same compiled graph: compile time no
longer grows with depth. Two things make the layers interchangeable to Dynamo: modules are
inlined (torch's default), so weights are graph inputs rather than constants, and each attention
module carries its own cache tensors (`PagedKVCache.bind`), so nothing specialises on `layer_idx`.

The compiled forwards are installed only while a decode step runs (`active()`); prefill chunks,
whose number, lengths and masks change every step, stay eager and never cause a compilation. A
model is touched only by the engine that owns it, on that engine's thread, so installing them
per call is safe beside other stages in the same process. Each graph batch size compiles on its
own, with static shapes (`dynamic=False`): the graphs' shapes are static anyway, and Dynamo's
automatic dynamic shapes keep their state per code object (of two Qwen2 models of different
widths in one process, the second compiled with its hidden size dynamic; the talker's layers run
the same `Qwen2_5OmniDecoderLayer.forward` as the thinker's). So a model compiles once per graph
batch size, whatever its depth, and Dynamo's recompile limit (per code object, shared by all
models in the process) is raised to fit.
transformers' output-capturing hooks inside the layers are dropped (`_drop_output_capturing_hooks`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from stages.ar.attention import ATTENTION_NAME, paged_attention_modules

RECOMPILE_LIMIT = 64
"""Compiled graphs per decoder-layer class in one process: graph batch sizes x models sharing it."""


def decoder_layers(model: torch.nn.Module, attention: str = ATTENTION_NAME) -> list[torch.nn.Module]:
    """The modules whose `self_attn` runs the paged attention (registered as `attention`), in model order."""
    attentions = set(paged_attention_modules(model, attention))
    return [module for module in model.modules() if getattr(module, "self_attn", None) in attentions]


def raise_recompile_limit() -> None:
    """Dynamo's recompile limit (per code object, shared by every model in the process) at least `RECOMPILE_LIMIT`."""
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)


class CompiledLayers:
    def __init__(self, model: torch.nn.Module, attention: str = ATTENTION_NAME):
        self.layers = decoder_layers(model, attention)
        if not self.layers:
            raise ValueError(f"{type(model).__name__} has no decoder layers with the paged attention to compile")
        _drop_output_capturing_hooks(model, self.layers)
        raise_recompile_limit()
        self._compiled = [torch.compile(layer.forward, dynamic=False) for layer in self.layers]

    @contextmanager
    def active(self) -> Iterator[None]:
        for layer, compiled in zip(self.layers, self._compiled, strict=True):
            layer.forward = compiled
        try:
            yield
        finally:
            for layer in self.layers:
                del layer.forward  # the class's own forward again


def _drop_output_capturing_hooks(model: torch.nn.Module, layers: list[torch.nn.Module]) -> None:
    """transformers records outputs (attention weights, router logits) through forward hooks that
    read a ContextVar, which Dynamo cannot trace: inside a compiled layer each would split the graph.
    The hooks are installed lazily on a model's first forward; install them now and drop those
    inside the layers (the paged attention returns no weights to record). The layers' own hooks,
    which collect the hidden states, run outside the compiled forward and stay."""
    from transformers.utils.output_capturing import install_all_output_capturing_hooks

    if not getattr(model, "_output_capturing_hooks_installed", False):
        install_all_output_capturing_hooks(model)
    for layer in layers:
        for module in layer.modules():
            if module is layer:
                continue
            for hook_id, hook in list(module._forward_hooks.items()):
                if getattr(hook, "__name__", "") == "output_capturing_hook":
                    del module._forward_hooks[hook_id]
