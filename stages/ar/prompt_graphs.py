"""CUDA graphs for a step that computes one prompt from its first token: captured once per token
bucket, replayed with the prompt padded to its bucket.

Run eagerly, such a step launches every small kernel of every layer from Python: on an H100 a
100-token prompt through the Qwen3-Omni thinker's 48 mixture-of-experts layers took ~0.1-0.2 s, the
device busy for a fraction of it (docs/qwen3-omni.md). Replayed, it costs its device time. A text
request that arrives while nothing else decodes has such a step before its first token.

A step is taken when it has no decodes and one chunk that starts at position 0, fits the largest
bucket, and has plain positions (no M-RoPE table, no position offset) and no per-row side inputs
(deepstack features): `takes`. Its L tokens fill the first L rows of the bucket's static buffers;
the B - L padded rows read token 0 (or stale embeddings), sit at positions L..B-1 after every real
row, and write their keys and values into the null block, so causal attention keeps them out of
the real rows. The context is read through a static block table: the sequence's blocks, then the
null block. Logits come for one row, the chunk's last. Buckets: 16, 32, ... doubling up to the
step's token budget (at most 1024); captured largest first into one memory pool
(`captured_steps.py`: a size that fails to capture leaves it and the smaller ones eager). With
`capture=False` the same static-buffer step runs eagerly (the tests check it on CPU against
transformers).
"""

from __future__ import annotations

import logging

import torch

from stages.ar.attention import AttentionBatch, PrefillChunk
from stages.ar.block_manager import NULL_BLOCK
from stages.ar.captured_steps import CapturedSteps, PinnedStaging
from stages.ar.model_adapter import ModelInputs, ModelOutputs
from stages.ar.mrope import has_rope_table
from stages.ar.sequence import Sequence

logger = logging.getLogger(__name__)

LARGEST_BUCKET = 1024


def prompt_buckets(max_tokens: int) -> list[int]:
    largest = min(max_tokens, LARGEST_BUCKET)
    sizes, size = [], 16
    while size < largest:
        sizes.append(size)
        size *= 2
    return sizes + [largest]


class PromptGraphs:
    def __init__(
        self, adapter, kv_cache, block_size: int, max_tokens: int, capture: bool = True, embeds_width: int | None = None
    ):
        self.adapter = adapter
        self.kv_cache = kv_cache
        self.block_size = block_size
        self.sizes = prompt_buckets(max_tokens)
        largest = self.sizes[-1]
        device = kv_cache.keys[0].device
        max_blocks = -(-largest // block_size)
        # One buffer, one host-to-device copy per replay: token ids, slots, block table, the last row.
        self.inputs = torch.zeros(2 * largest + max_blocks + 1, dtype=torch.long, device=device)
        self.ids = self.inputs[:largest]
        self.slots = self.inputs[largest : 2 * largest]
        self.table = self.inputs[2 * largest : 2 * largest + max_blocks]
        self.last = self.inputs[-1:]
        self.staging = PinnedStaging(self.inputs)
        self.positions = torch.arange(largest, dtype=torch.long, device=device).unsqueeze(0)
        self.takes_embeds = embeds_width is not None
        if self.takes_embeds:
            dtype = next(adapter.model.parameters()).dtype
            self.embeds = torch.zeros((largest, embeds_width), dtype=dtype, device=device)
        self.capture = capture
        self.steps = CapturedSteps(self._forward, "prompt step of tokens")
        if capture:
            self.steps.capture(self.sizes)
            logger.info("prompt steps captured for %s tokens", sorted(self.steps.graphs))

    def takes(self, seq: Sequence, start: int, count: int) -> bool:
        """Whether this chunk (the step's only work) runs through a prompt graph."""
        if start != 0 or count > self.sizes[-1] or seq.position_delta:
            return False
        if has_rope_table(seq) or seq.extra.get("deepstack") is not None:  # read from the sequence, not the graph
            return False
        if not self.takes_embeds and seq.embeds_rows(0, count):
            return False
        size = next(s for s in self.sizes if s >= count)
        return size in self.steps.graphs or not self.capture

    def _forward(self, size: int) -> ModelOutputs:
        blocks = -(-size // self.block_size)
        attention = AttentionBatch(
            kv_cache=self.kv_cache,
            slot_mapping=self.slots[:size],
            prefills=[PrefillChunk(0, size, size, self.table[:blocks], None)],
        )
        inputs = ModelInputs(
            input_ids=None if self.takes_embeds else self.ids[:size].unsqueeze(0),
            inputs_embeds=self.embeds[:size].unsqueeze(0) if self.takes_embeds else None,
            position_ids=self.positions[:, :size],
            logits_indices=self.last,
            output_hidden_states=True,
            attention=attention,
            sequences=[],
        )
        return self.adapter.forward(inputs)

    @torch.inference_mode()
    def run(
        self,
        token_ids: list[int],
        slots: list[int],
        block_table: list[int],
        embeds: torch.Tensor | None = None,
        with_hidden: bool = False,
    ) -> ModelOutputs:
        """The chunk's forward: logits of its last row, and its rows' hidden states."""
        count = len(token_ids)
        size = next(s for s in self.sizes if s >= count)
        largest = self.sizes[-1]
        staged = self.staging.fill()
        staged[:] = 0  # padded rows: token 0, slot 0 (in the null block)
        staged[:count] = token_ids
        staged[largest : largest + count] = slots
        blocks = -(-count // self.block_size)  # those the chunk's positions are in
        table = staged[2 * largest : -1]
        table[:] = NULL_BLOCK
        table[:blocks] = block_table[:blocks]
        staged[-1] = count - 1
        self.staging.send()
        if embeds is not None:
            self.embeds[:count].copy_(embeds)
        out = self.steps.run(size)
        hidden = None
        if with_hidden and out.hidden_states is not None:
            hidden = tuple(h[:count] for h in out.hidden_states)
        last = out.last_hidden[:count] if out.last_hidden is not None else None
        return ModelOutputs(logits=out.logits, hidden_states=hidden, last_hidden=last)
