"""The seam between the engine and a model: how tokens become embeddings, logits and hidden states.

The plain-LLM path needs nothing here: `CausalLMAdapter` wraps any `AutoModelForCausalLM`. A model
family with a different module (the thinker inside `Qwen2_5OmniForConditionalGeneration`, a talker
whose per-step input embedding comes from a callback) passes its own adapter to `ARTorchEngine`:

    class ModelAdapter(Protocol):
        model: torch.nn.Module         # its attention layers use attn_implementation=ATTENTION_NAME
        text_config: PretrainedConfig  # num_hidden_layers, num_key_value_heads, head_dim, vocab_size
        always_embed: bool             # True: the engine always calls embed() (e.g. a talker)
        embeds_width: int              # with always_embed: the width of embed()'s rows
        supports_cuda_graphs: bool     # forward() has static shapes and no host syncs on decode

        def embed(self, token_ids: Tensor, inputs: ModelInputs) -> Tensor: ...   # [T] -> [T, hidden]
        def forward(self, inputs: ModelInputs) -> ModelOutputs: ...
        def admit(self, seq: Sequence, request: StageRequest) -> None: ...      # optional
        def embed_media(self, seqs) -> list[tuple[Sequence, Exception]]: ...    # optional
        def observe(self, sequences, outputs: ModelOutputs) -> None: ...         # optional

`embed` is called only when a batch needs embeddings (a request gave `inputs_embeds`, or
`always_embed`); `inputs.sequences` says which request owns which rows, and each `Sequence` has an
`extra` dict for the adapter's per-request state (rope deltas, upstream hidden states, ...).
`forward` must pass `ar_batch=inputs.attention` down to the model so the paged attention finds the
cache; it may rewrite `position_ids` (e.g. 3-row M-RoPE positions, see `stages/ar/mrope.py`).
`admit` (optional) sees each request once it is a `Sequence`: it may replace the prompt rows by
embeddings (multimodal features merged), set rotary tables and `position_delta`, and queue params
for the first output. `embed_media` (optional) gets, before each step, the sequences admitted since
the last one: it sets their prompt embeddings from their media in as few encoder calls as it can
(the thinker's audio clips in one) and returns those that failed, which fail alone. `observe`
(optional) sees every step's outputs with the packed `(sequence, first position, count)` list, eager
or replayed alike: an adapter that needs a row of the final hidden state after the step (a talker's
code predictor reads it at the next step) returns `last_hidden` [T, hidden] from `forward` and keeps
its rows there (copies: a replayed graph's outputs are overwritten by the next replay). Decode
batches of an always-embedding adapter replay CUDA graphs that read their rows from a static
[max_batch, embeds_width] buffer.

Loading such a module: call `stages.ar.attention.register()` first, and give only the autoregressive
text part the paged attention, e.g. `attn_implementation={"text_config": ATTENTION_NAME, "": "sdpa"}`
style per-sub-config choices, so audio and vision encoders keep their own attention and masks. Then
`ARTorchEngine(MyAdapter(model.thinker), tokenizer, stage_deploy, eos_token_ids={...})`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from stages.ar.attention import AttentionBatch
from stages.ar.sequence import Sequence


@dataclass
class ModelInputs:
    input_ids: torch.Tensor | None
    """[1, T] packed token ids, or None when `inputs_embeds` is given."""
    inputs_embeds: torch.Tensor | None
    """[1, T, hidden]"""
    position_ids: torch.Tensor
    """[1, T] position of each packed token within its sequence."""
    logits_indices: torch.Tensor | None
    """Which of the T rows need logits (None: all rows)."""
    output_hidden_states: bool
    attention: AttentionBatch
    sequences: list[tuple[Sequence, int, int]]
    """(sequence, first position, number of tokens) in packing order."""


@dataclass
class ModelOutputs:
    logits: torch.Tensor
    """[rows, vocab] for the rows in `logits_indices`."""
    hidden_states: tuple[torch.Tensor, ...] | None
    """transformers' `output_hidden_states` tuple, each [T, hidden]."""
    last_hidden: torch.Tensor | None = None
    """[T, hidden] the final (normed) hidden state of every row, for adapters that `observe` it."""


class CausalLMAdapter:
    """Any transformers `*ForCausalLM`, called unmodified with `logits_to_keep` = the sampled rows."""

    always_embed = False
    supports_cuda_graphs = True

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.text_config = model.config.get_text_config()

    def embed(self, token_ids: torch.Tensor, inputs: ModelInputs) -> torch.Tensor:
        return self.model.get_input_embeddings()(token_ids)

    def forward(self, inputs: ModelInputs) -> ModelOutputs:
        kwargs: dict[str, Any] = {}
        if inputs.output_hidden_states:
            kwargs["output_hidden_states"] = True
        out = self.model(
            input_ids=inputs.input_ids,
            inputs_embeds=inputs.inputs_embeds,
            position_ids=inputs.position_ids,
            logits_to_keep=0 if inputs.logits_indices is None else inputs.logits_indices,
            use_cache=False,
            ar_batch=inputs.attention,
            **kwargs,
        )
        hidden = tuple(h[0] for h in out.hidden_states) if inputs.output_hidden_states else None
        return ModelOutputs(logits=out.logits[0], hidden_states=hidden)
