"""CUDA graphs for decode batches: captured once per bucketed batch size over static buffers.

Buckets follow nano-vllm: 1, 2, 4, 8, then every 16 up to the max batch; captured largest first
into one shared memory pool. A live batch of n decodes is copied into the first n rows of the
static buffers of the smallest bucket >= n; padded rows write their keys and values into the null
block and attend only to it. The context is gathered at a fixed width (the max length), so every
captured shape is static; per step only ids, positions, slots, block tables and lengths change, in
one host-to-device copy. For an adapter that always embeds (`embeds_width` set), the graph reads
its input embeddings from a static [max_batch, width] buffer instead of token ids.

With `capture=False` the same static-buffer step runs eagerly (on any device): the tests use it to
check the padding and masking of graph batches on CPU against transformers. With `compile=True` the
step's decoder layers run one `torch.compile`d layer (`compiled_layers.py`; Inductor fuses the
norms, rotary embeddings and activations, so each replay launches far fewer kernels); if
compilation fails, the uncompiled step is captured instead. A size whose capture fails (logged) and
every smaller one run the same static-buffer step eagerly.
"""

from __future__ import annotations

import logging
import time
from contextlib import nullcontext

import torch

from stages.ar.attention import AttentionBatch
from stages.ar.captured_steps import CapturedSteps, PinnedStaging
from stages.ar.compiled_layers import CompiledLayers
from stages.ar.model_adapter import ModelInputs, ModelOutputs

logger = logging.getLogger(__name__)


def bucket_sizes(max_batch: int, smallest: int = 1) -> list[int]:
    sizes = [size for size in (1, 2, 4, 8) if smallest <= size < max_batch] + list(range(16, max_batch, 16))
    return sorted(set(sizes + [max_batch]))


class DecodeGraphs:
    def __init__(
        self,
        adapter,
        kv_cache,
        block_size: int,
        max_batch: int,
        max_context: int,
        capture: bool = True,
        compile: bool = False,
        embeds_width: int | None = None,
    ):
        self.adapter = adapter
        self.compiled = CompiledLayers(adapter.model) if compile else None
        self.kv_cache = kv_cache
        self.block_size = block_size
        self.sizes = bucket_sizes(max_batch)
        device = kv_cache.keys[0].device
        max_blocks = -(-max_context // block_size)
        # One buffer, one host-to-device copy per step: columns ids, positions, slots, context lengths, blocks.
        self.inputs = torch.zeros((max_batch, 4 + max_blocks), dtype=torch.long, device=device)
        self.inputs[:, 3] = 1
        self.staging = PinnedStaging(self.inputs)
        self.context_positions = torch.arange(max_blocks * block_size, dtype=torch.long, device=device)
        self.takes_embeds = embeds_width is not None
        if self.takes_embeds:
            dtype = next(adapter.model.parameters()).dtype
            self.embeds = torch.zeros((max_batch, embeds_width), dtype=dtype, device=device)
        self.steps = CapturedSteps(self._forward, "decode step of batch")
        if capture:
            self._capture()

    def fits(self, batch_size: int) -> bool:
        return batch_size <= self.sizes[-1]

    @torch.inference_mode()
    def _capture(self) -> None:
        if self.compiled is not None:
            logger.info(
                "compiling the decode step: one graph per batch size %s, shared by %d decoder layers",
                self.sizes,
                len(self.compiled.layers),
            )
        self.steps.capture(self.sizes, warm_up=self._warm_up)

    def _warm_up(self, size: int) -> None:
        """Run once outside the graph (lazy inits, autotuning, compilation); fall back to eager on failure."""
        began = time.perf_counter()
        try:
            self._forward(size)
        except Exception:
            if self.compiled is None:
                raise
            logger.exception("compiling the decode step failed; capturing it uncompiled")
            self.compiled = None
            self._forward(size)
        if self.compiled is not None:
            logger.info("decode step of batch %d compiled and run in %.1f s", size, time.perf_counter() - began)

    def _forward(self, size: int) -> ModelOutputs:
        rows = self.inputs[:size]
        embeds = self.embeds[:size].unsqueeze(0) if self.takes_embeds else None
        with self.compiled.active() if self.compiled is not None else nullcontext():
            return self._decode_step(
                rows[:, 0].unsqueeze(0), embeds, rows[:, 1].unsqueeze(0), rows[:, 2], rows[:, 4:], rows[:, 3]
            )

    def _decode_step(self, input_ids, inputs_embeds, positions, slot_mapping, block_tables, context_lens):
        mask = (self.context_positions.unsqueeze(0) < context_lens.unsqueeze(1)).unsqueeze(1).unsqueeze(1)
        attention = AttentionBatch(
            kv_cache=self.kv_cache,
            slot_mapping=slot_mapping,
            num_decodes=input_ids.shape[1],
            decode_block_tables=block_tables,
            decode_mask=mask,
        )
        inputs = ModelInputs(
            input_ids=None if inputs_embeds is not None else input_ids,
            inputs_embeds=inputs_embeds,
            position_ids=positions,
            logits_indices=None,
            output_hidden_states=True,
            attention=attention,
            sequences=[],
        )
        return self.adapter.forward(inputs)

    @torch.inference_mode()
    def run(
        self,
        token_ids: list[int],
        positions: list[int],
        slots: list[int],
        lengths: list[int],
        block_tables: list[list[int]],
        embeds: torch.Tensor | None = None,
        with_hidden: bool = False,
    ) -> ModelOutputs:
        """One decode step of `len(token_ids)` rows; padded rows read token 0 and attend to the null block."""
        count = len(token_ids)
        size = next(s for s in self.sizes if s >= count)
        staged = self.staging.fill()[:size]
        staged[:, 4:] = 0
        staged[count:, :3] = 0
        staged[count:, 3] = 1
        staged[:count, 0] = token_ids
        staged[:count, 1] = positions
        staged[:count, 2] = slots
        staged[:count, 3] = lengths
        for row, table in enumerate(block_tables):
            staged[row, 4 : 4 + len(table)] = table
        self.staging.send(rows=size)
        if embeds is not None:
            self.embeds[:count].copy_(embeds)
        out = self.steps.run(size)
        hidden = tuple(h[:count] for h in out.hidden_states) if with_hidden else None
        last = out.last_hidden[:count] if out.last_hidden is not None else None
        return ModelOutputs(logits=out.logits[:count], hidden_states=hidden, last_hidden=last)
