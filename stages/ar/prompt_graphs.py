"""CUDA graphs for a step that computes prompts from their first token: captured once per token
bucket, replayed with the prompts packed and padded to their bucket.

Run eagerly, such a step launches every small kernel of every layer from Python: on an H100 a
100-token prompt through the Qwen3-Omni thinker's 48 mixture-of-experts layers took ~0.1-0.2 s, the
device busy for a fraction of it (docs/qwen3-omni.md). Replayed, it costs its device time. Requests
that arrive together have such a step before their first tokens; a request that arrives while others
decode has one beside their decode graph (`ModelRunner`'s split step).

Prompts are taken when each starts at position 0 with plain positions (no M-RoPE table, no position
offset) and no per-row side inputs (deepstack features), at most `max_prompts` of them, their tokens
together fitting the largest bucket: `takes`; a step with more (many requests arriving at once)
replays once per consecutive group of its prompts that fits (`groups`). Their L tokens fill the
first L rows of the bucket's static buffers, each row at its position in its own prompt; the B - L
padded rows read token 0 (or stale embeddings) and write their keys and values into the null block.
Attention reads the step's own keys and values, not the cache (every prompt starts at 0, so its
context is its own rows): one masked attention over the bucket, each row seeing the rows of its
prompt up to itself (a padded row, itself alone). The mask is computed inside the graph from one
static row per token, the packed row where its prompt starts. Logits come for the rows that sample
(padded to `max_prompts` with row 0). Buckets: 16, 32, ... doubling up to the step's token budget
(at most 1024); captured largest first into one memory pool (`captured_steps.py`: a size that fails
to capture leaves it and the smaller ones eager). With `capture=False` the same static-buffer step
runs eagerly (the tests check it on CPU against transformers).
"""

from __future__ import annotations

import logging

import torch

from stages.ar.attention import AttentionBatch, PrefillChunk
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
        self,
        adapter,
        kv_cache,
        max_tokens: int,
        max_prompts: int,
        capture: bool = True,
        embeds_width: int | None = None,
    ):
        self.adapter = adapter
        self.kv_cache = kv_cache
        self.sizes = prompt_buckets(max_tokens)
        largest = self.sizes[-1]
        self.max_prompts = min(max_prompts, largest)
        device = kv_cache.keys[0].device
        # One buffer, one host-to-device copy per replay: token ids, slots, positions, prompt starts, logits rows.
        self.inputs = torch.zeros(4 * largest + self.max_prompts, dtype=torch.long, device=device)
        self.ids, self.slots, self.positions, self.starts = self.inputs[: 4 * largest].view(4, largest)
        self.logits_rows = self.inputs[4 * largest :]
        self.staging = PinnedStaging(self.inputs)
        self.rows = torch.arange(largest, dtype=torch.long, device=device)
        self.takes_embeds = embeds_width is not None
        if self.takes_embeds:
            dtype = next(adapter.model.parameters()).dtype
            self.embeds = torch.zeros((largest, embeds_width), dtype=dtype, device=device)
        self.capture = capture
        self.steps = CapturedSteps(self._forward, "prompt step of tokens")
        if capture:
            self.steps.capture(self.sizes)
            logger.info("prompt steps captured for %s tokens", sorted(self.steps.graphs))

    def takes(self, owners: list[tuple[Sequence, int, int]]) -> bool:
        """Whether these chunks (sequence, first position, tokens) run through a prompt graph together."""
        if not owners or len(owners) > self.max_prompts:
            return False
        total = sum(count for _, _, count in owners)
        if total > self.sizes[-1] or not all(self._plain(*owner) for owner in owners):
            return False
        size = next(s for s in self.sizes if s >= total)
        return size in self.steps.graphs or not self.capture

    def groups(self, owners: list[tuple[Sequence, int, int]]) -> list[int] | None:
        """How many of these chunks, in order, each replay takes when they need more than one (more
        tokens than the largest bucket, or more prompts than `max_prompts`): consecutive groups, each
        filled as far as it fits; None when some chunk runs through no prompt graph."""
        counts, tokens = [0], 0
        for _, _, count in owners:
            if counts[-1] and (tokens + count > self.sizes[-1] or counts[-1] == self.max_prompts):
                counts.append(0)
                tokens = 0
            counts[-1] += 1
            tokens += count
        first = 0
        for count in counts:
            if not self.takes(owners[first : first + count]):
                return None
            first += count
        return counts

    def _plain(self, seq: Sequence, start: int, count: int) -> bool:
        if start != 0 or seq.position_delta:
            return False
        if has_rope_table(seq) or seq.extra.get("deepstack") is not None:  # read from the sequence, not the graph
            return False
        return self.takes_embeds or not seq.embeds_rows(0, count)

    def _forward(self, size: int) -> ModelOutputs:
        starts, rows = self.starts[:size], self.rows[:size]
        same_prompt_so_far = (starts.unsqueeze(0) == starts.unsqueeze(1)) & (rows.unsqueeze(0) <= rows.unsqueeze(1))
        attention = AttentionBatch(
            kv_cache=self.kv_cache,
            slot_mapping=self.slots[:size],
            prefills=[PrefillChunk(0, size, size, None, same_prompt_so_far)],
        )
        inputs = ModelInputs(
            input_ids=None if self.takes_embeds else self.ids[:size].unsqueeze(0),
            inputs_embeds=self.embeds[:size].unsqueeze(0) if self.takes_embeds else None,
            position_ids=self.positions[:size].unsqueeze(0),
            logits_indices=self.logits_rows,
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
        counts: list[int],
        logits_rows: list[int],
        embeds: torch.Tensor | None = None,
        with_hidden: bool = False,
    ) -> ModelOutputs:
        """The prompts' forward (`counts`: each prompt's tokens, packed in order): logits of
        `logits_rows`, and the rows' hidden states."""
        total = len(token_ids)
        size = next(s for s in self.sizes if s >= total)
        largest = self.sizes[-1]
        staged = self.staging.fill()
        ids, slot_rows, positions, starts = staged[: 4 * largest].reshape(4, largest)
        ids[:] = 0  # padded rows: token 0, slot 0 (in the null block), a prompt of their own
        ids[:total] = token_ids
        slot_rows[:] = 0
        slot_rows[:total] = slots
        positions[:] = 0
        starts[:] = range(largest)
        first = 0
        for count in counts:
            positions[first : first + count] = range(count)
            starts[first : first + count] = first
            first += count
        rows = staged[4 * largest :]
        rows[:] = 0
        rows[: len(logits_rows)] = logits_rows
        self.staging.send()
        if embeds is not None:
            self.embeds[:total].copy_(embeds)
        out = self.steps.run(size)
        hidden = None
        if with_hidden and out.hidden_states is not None:
            hidden = tuple(h[:total] for h in out.hidden_states)
        last = out.last_hidden[:total] if out.last_hidden is not None else None
        return ModelOutputs(logits=out.logits[: len(logits_rows)], hidden_states=hidden, last_hidden=last)
