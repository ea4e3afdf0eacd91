"""Turns a scheduled batch into tensors, runs the model adapter, and returns logits and hidden states.

All scheduled tokens are packed into one row: the single-token work first (the batched decode
group of the paged attention), then each prompt chunk. Only the rows that sample (the last row of
a sequence whose known tokens are then all computed and whose input is complete) get logits.
Positions are token indices plus the sequence's `position_delta` (M-RoPE models; an adapter may
rewrite prompt positions). On CUDA, decode batches replay a captured graph (see
`cuda_graphs.DecodeGraphs`); for an adapter that always embeds (a talker), the embeddings are
computed eagerly and the graph takes them from its static buffer. A step that also computes prompt
chunks runs in two forwards: the decodes replay their graph, then the chunks (`last_path` "split").
Under load requests arrive all the time, and one eager forward for the whole step would cost every
running request an eager decode whenever anyone is admitted. With prompt graphs enabled, prompts
from their first token replay a graph captured for their token bucket
(`prompt_graphs.PromptGraphs`): alone in a step (`last_path` "prompt") or after the decodes'
graph ("split-prompt"), once per group of prompts that fits a bucket; other chunks run eagerly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from stages.ar.attention import AttentionBatch, PrefillChunk
from stages.ar.block_manager import NULL_BLOCK, BlockManager
from stages.ar.kv_cache import PagedKVCache
from stages.ar.model_adapter import ModelInputs, ModelOutputs
from stages.ar.scheduler import ScheduledBatch
from stages.ar.sequence import Sequence


@dataclass
class StepResult:
    logits: torch.Tensor | None
    """[len(sampling), vocab]"""
    sampling: list[Sequence]
    hidden: dict[int, tuple[int, torch.Tensor]] = field(default_factory=dict)
    """id(sequence) -> (first position, [num_layers, n, hidden] on CPU) for requests that asked."""


@dataclass
class _Packed:
    token_ids: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)
    owners: list[tuple[Sequence, int, int]] = field(default_factory=list)
    logits_rows: list[int] = field(default_factory=list)
    sampling: list[Sequence] = field(default_factory=list)


class ModelRunner:
    split_mixed_steps = True
    """Decodes replay their graph beside an eager forward of the step's prompt chunks (see above)."""

    def __init__(self, adapter, kv_cache: PagedKVCache, block_manager: BlockManager, device: torch.device):
        self.adapter = adapter
        self.kv_cache = kv_cache
        self.block_manager = block_manager
        self.device = device
        self.graphs = None
        self.prompt_graphs = None
        self.last_path = "none"
        """How the last step ran: "graph", "eager", "split", "prompt" or "split-prompt"."""

    def enable_cuda_graphs(self, max_batch: int, max_context: int, capture: bool = True, compile: bool = False) -> None:
        from stages.ar.cuda_graphs import DecodeGraphs

        block_size = self.block_manager.block_size
        embeds_width = self.adapter.embeds_width if self.adapter.always_embed else None
        self.graphs = DecodeGraphs(
            self.adapter, self.kv_cache, block_size, max_batch, max_context, capture, compile, embeds_width
        )

    def enable_prompt_graphs(self, max_tokens: int, max_prompts: int, capture: bool = True) -> None:
        from stages.ar.prompt_graphs import PromptGraphs

        embeds_width = self.adapter.embeds_width if self.adapter.always_embed else None
        self.prompt_graphs = PromptGraphs(self.adapter, self.kv_cache, max_tokens, max_prompts, capture, embeds_width)

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch) -> StepResult:
        num_decodes = batch.num_decodes
        packed = self._pack(batch, num_decodes)
        wants_hidden = any(seq.hidden_layers for seq, _, _ in packed.owners)
        groups = self._prompt_groups(packed, num_decodes)
        if groups is not None:
            self.last_path, outputs = "prompt", _concat(self._run_prompt_graphs(packed, groups, wants_hidden))
        elif self._decodes_replay(packed, num_decodes):
            if num_decodes == len(packed.owners):
                self.last_path, outputs = "graph", self._run_graph(packed, wants_hidden)
            else:
                self.last_path, outputs = self._run_split(packed, num_decodes, wants_hidden)
        else:
            needs_embeds = self._needs_embeds(packed.owners)
            self.last_path, outputs = "eager", self._run_eager(packed, num_decodes, wants_hidden, needs_embeds)
        observe = getattr(self.adapter, "observe", None)
        if observe is not None:
            observe(packed.owners, outputs)
        result = StepResult(logits=outputs.logits if packed.sampling else None, sampling=packed.sampling)
        if wants_hidden:
            result.hidden = self._hidden_rows(packed, outputs.hidden_states)
        return result

    def _prompt_groups(self, packed: _Packed, num_decodes: int) -> list[int] | None:
        """When this step is prompts from their first token that prompt graphs take: how many chunks
        each replay takes (`PromptGraphs.groups`)."""
        if self.prompt_graphs is None or num_decodes:
            return None
        return self.prompt_graphs.groups(packed.owners)

    def _run_prompt_graphs(self, packed: _Packed, groups: list[int], wants_hidden: bool) -> list[ModelOutputs]:
        """One replay per group; every replay but the last is kept (copied) before the next overwrites it."""
        layers = {layer for seq, _, _ in packed.owners for layer in seq.hidden_layers}
        outputs, first = [], 0
        for count in groups:
            group = _owners_slice(packed, first, first + count)
            first += count
            out = self._run_prompt_graph(group, wants_hidden)
            outputs.append(out if first == len(packed.owners) else _kept(out, layers))
        return outputs

    def _run_prompt_graph(self, packed: _Packed, wants_hidden: bool) -> ModelOutputs:
        embeds = self._graph_embeddings(packed) if self.prompt_graphs.takes_embeds else None
        counts = [count for _, _, count in packed.owners]
        return self.prompt_graphs.run(packed.token_ids, packed.slots, counts, packed.logits_rows, embeds, wants_hidden)

    def _decodes_replay(self, packed: _Packed, num_decodes: int) -> bool:
        """Whether this step's decodes run through the graph step (alone, or split from its prompt chunks)."""
        if self.graphs is None or not num_decodes or not self.graphs.fits(num_decodes):
            return False
        if num_decodes < len(packed.owners) and not self.split_mixed_steps:
            return False
        return self.graphs.takes_embeds or not self._needs_embeds(packed.owners[:num_decodes])

    def _needs_embeds(self, owners) -> bool:
        return self.adapter.always_embed or any(
            seq.has_embeds and seq.embeds_rows(start, start + count) for seq, start, count in owners
        )

    def _run_split(self, packed: _Packed, num_decodes: int, wants_hidden: bool) -> tuple[str, ModelOutputs]:
        decodes = _owners_slice(packed, 0, num_decodes)
        prompts = _owners_slice(packed, num_decodes, len(packed.owners))
        first = self._run_graph(decodes, wants_hidden)
        groups = self._prompt_groups(prompts, 0)
        if groups is not None:
            return "split-prompt", _concat([first, *self._run_prompt_graphs(prompts, groups, wants_hidden)])
        second = self._run_eager(prompts, 0, wants_hidden, self._needs_embeds(prompts.owners))
        return "split", _concat([first, second])

    def _pack(self, batch: ScheduledBatch, num_decodes: int) -> _Packed:
        """The single-token work (first in `batch.work`) in bulk, then each prompt chunk."""
        packed = self._pack_decodes([seq for seq, _ in batch.work[:num_decodes]])
        for seq, count in batch.work[num_decodes:]:
            start, end = seq.num_computed_tokens, seq.num_computed_tokens + count
            row = len(packed.token_ids)
            packed.token_ids.extend(seq.token_ids[start:end])
            packed.positions.extend(range(start + seq.position_delta, end + seq.position_delta))
            packed.slots.extend(self.block_manager.slots(seq, start, end))
            packed.owners.append((seq, start, count))
            if end == seq.num_tokens and seq.input_finished:
                packed.logits_rows.append(row + count - 1)
                packed.sampling.append(seq)
        return packed

    def _pack_decodes(self, seqs: list[Sequence]) -> _Packed:
        size = self.block_manager.block_size
        starts = [seq.num_computed_tokens for seq in seqs]
        pairs = list(zip(seqs, starts, strict=True))
        packed = _Packed(
            token_ids=[seq.token_ids[start] for seq, start in pairs],
            positions=[start + seq.position_delta for seq, start in pairs],
            slots=[seq.block_table[start // size] * size + start % size for seq, start in pairs],
            owners=[(seq, start, 1) for seq, start in pairs],
        )
        for row, (seq, start) in enumerate(pairs):
            if start + 1 == seq.num_tokens and seq.input_finished:
                packed.logits_rows.append(row)
                packed.sampling.append(seq)
        return packed

    def _run_eager(self, packed: _Packed, num_decodes: int, wants_hidden: bool, needs_embeds: bool) -> ModelOutputs:
        device = self.device
        attention = AttentionBatch(
            kv_cache=self.kv_cache,
            slot_mapping=torch.tensor(packed.slots, dtype=torch.long).to(device),
            num_decodes=num_decodes,
        )
        if num_decodes:
            attention.decode_block_tables, attention.decode_mask = self._decode_layout(packed.owners[:num_decodes])
        row = num_decodes
        for seq, start, count in packed.owners[num_decodes:]:
            attention.prefills.append(self._prefill_chunk(seq, start, count, row))
            row += count
        input_ids = torch.tensor(packed.token_ids, dtype=torch.long, device=device).unsqueeze(0)
        inputs = ModelInputs(
            input_ids=input_ids,
            inputs_embeds=None,
            position_ids=torch.tensor(packed.positions, dtype=torch.long, device=device).unsqueeze(0),
            logits_indices=torch.tensor(packed.logits_rows, dtype=torch.long, device=device),
            output_hidden_states=wants_hidden,
            attention=attention,
            sequences=packed.owners,
        )
        if needs_embeds:
            inputs.inputs_embeds = self._embeddings(input_ids[0], inputs).unsqueeze(0)
            inputs.input_ids = None
        return self.adapter.forward(inputs)

    def _run_graph(self, packed: _Packed, wants_hidden: bool) -> ModelOutputs:
        tables = [seq.block_table for seq, _, _ in packed.owners]
        lengths = [start + 1 for _, start, _ in packed.owners]
        embeds = self._graph_embeddings(packed) if self.graphs.takes_embeds else None
        outputs = self.graphs.run(
            packed.token_ids, packed.positions, packed.slots, lengths, tables, embeds, with_hidden=wants_hidden
        )
        if len(packed.logits_rows) != len(packed.owners):
            outputs.logits = outputs.logits[packed.logits_rows]
        return outputs

    def _graph_embeddings(self, packed: _Packed) -> torch.Tensor:
        """The input embeddings of a batch whose graph reads them from its static buffer."""
        token_ids = torch.tensor(packed.token_ids, dtype=torch.long, device=self.device)
        inputs = ModelInputs(  # what `adapter.embed` reads: the batch's tokens, positions and owners
            input_ids=None,
            inputs_embeds=None,
            position_ids=torch.tensor(packed.positions, dtype=torch.long).unsqueeze(0),
            logits_indices=None,
            output_hidden_states=False,
            attention=None,
            sequences=packed.owners,
        )
        return self._embeddings(token_ids, inputs)

    def _block_tables(self, owners) -> tuple[torch.Tensor, list[int]]:
        lengths = [start + count for _, start, count in owners]
        width = max(len(seq.block_table) for seq, _, _ in owners)
        rows = [seq.block_table + [NULL_BLOCK] * (width - len(seq.block_table)) for seq, _, _ in owners]
        return torch.tensor(rows, dtype=torch.long), lengths

    def _decode_layout(self, owners) -> tuple[torch.Tensor, torch.Tensor]:
        tables, lengths = self._block_tables(owners)
        width = tables.shape[1] * self.block_manager.block_size
        mask = torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
        return tables.to(self.device), mask.view(len(owners), 1, 1, -1).to(self.device)

    def _prefill_chunk(self, seq: Sequence, start: int, count: int, row: int) -> PrefillChunk:
        end = start + count
        num_blocks = -(-end // self.block_manager.block_size)
        table = torch.tensor(seq.block_table[:num_blocks], dtype=torch.long).to(self.device)
        mask = None
        if start:
            query_positions = torch.arange(start, end, device=self.device).unsqueeze(1)
            mask = torch.arange(end, device=self.device).unsqueeze(0) <= query_positions
        return PrefillChunk(query_start=row, query_len=count, context_len=end, block_table=table, mask=mask)

    def _embeddings(self, token_ids: torch.Tensor, inputs: ModelInputs) -> torch.Tensor:
        embeds = self.adapter.embed(token_ids, inputs)
        row = 0
        for seq, start, count in inputs.sequences:
            for offset, rows in seq.embeds_rows(start, start + count):
                embeds[row + offset : row + offset + rows.shape[0]] = rows.to(embeds.device, embeds.dtype)
            row += count
        return embeds

    def _hidden_rows(self, packed: _Packed, hidden_states) -> dict[int, tuple[int, torch.Tensor]]:
        """The asked-for layers' rows of every sequence that wants them, moved to the CPU in one copy."""
        wanted, pieces = [], []
        row = 0
        for seq, start, count in packed.owners:
            first = max(start, seq.num_hidden_emitted)
            if seq.hidden_layers and first < start + count:
                lo, hi = row + first - start, row + count
                pieces.append(torch.stack([hidden_states[layer][lo:hi] for layer in seq.hidden_layers]))
                wanted.append((seq, first, hi - lo))
            row += count
        if not pieces:
            return {}
        width = pieces[0].shape[-1]
        flat = torch.cat([piece.reshape(-1, width) for piece in pieces]).to("cpu")
        parts = flat.split([piece.shape[0] * piece.shape[1] for piece in pieces])
        return {
            id(seq): (first, part.view(len(seq.hidden_layers), count, width))
            for (seq, first, count), part in zip(wanted, parts, strict=True)
        }


def _owners_slice(packed: _Packed, first: int, end: int) -> _Packed:
    """The chunks of owners [first, end), packed from row 0 (their token rows, their logits rows)."""
    low = sum(count for _, _, count in packed.owners[:first])
    high = low + sum(count for _, _, count in packed.owners[first:end])
    sampled = [(row, seq) for row, seq in zip(packed.logits_rows, packed.sampling, strict=True) if low <= row < high]
    return _Packed(
        token_ids=packed.token_ids[low:high],
        positions=packed.positions[low:high],
        slots=packed.slots[low:high],
        owners=packed.owners[first:end],
        logits_rows=[row - low for row, _ in sampled],
        sampling=[seq for _, seq in sampled],
    )


def _kept(outputs: ModelOutputs, layers: set[int]) -> ModelOutputs:
    """A replay's outputs copied out of its static buffers: the logits, the last hidden state and
    the hidden layers in `layers` (the others None)."""
    hidden = None
    if outputs.hidden_states is not None:
        count = len(outputs.hidden_states)
        wanted = {layer % count for layer in layers}  # layers may count from the end (-1: the last)
        hidden = tuple(h.clone() if i in wanted else None for i, h in enumerate(outputs.hidden_states))
    last = outputs.last_hidden.clone() if outputs.last_hidden is not None else None
    return ModelOutputs(logits=outputs.logits.clone(), hidden_states=hidden, last_hidden=last)


def _concat(parts: list[ModelOutputs]) -> ModelOutputs:
    """Forwards' outputs as one step's, rows in packing order: copies of several parts (a replayed
    graph's outputs are reused), a single part as it is. A hidden layer that some part left out
    (None) is left out of the whole."""
    if len(parts) == 1:
        return parts[0]
    hidden = None
    if all(part.hidden_states is not None for part in parts):
        layers = zip(*(part.hidden_states for part in parts), strict=True)
        hidden = tuple(None if any(h is None for h in layer) else torch.cat(layer) for layer in layers)
    last = None
    if all(part.last_hidden is not None for part in parts):
        last = torch.cat([part.last_hidden for part in parts])
    return ModelOutputs(logits=torch.cat([part.logits for part in parts]), hidden_states=hidden, last_hidden=last)
