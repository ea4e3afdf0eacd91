"""Continuous batching: which sequences compute how many tokens this step.

Policy (nano-vllm's, with vLLM's single counter): running sequences first, in arrival order; a
decode takes one token, a prompt chunk takes what is left of the per-step token budget. When the
cache cannot hold a running sequence's new tokens, the most recently admitted running sequence is
preempted (its blocks freed, recomputed later from its tokens). Then waiting sequences are admitted
in order while budget, batch slots and blocks last. Sequences waiting for input chunks are skipped.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from stages.ar.block_manager import BlockManager
from stages.ar.sequence import Sequence, SequenceStatus


@dataclass
class ScheduledBatch:
    work: list[tuple[Sequence, int]] = field(default_factory=list)
    """(sequence, tokens to compute) with single-token work first (the batched decode group)."""
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(count for _, count in self.work)

    @property
    def num_decodes(self) -> int:
        return sum(1 for _, count in self.work if count == 1)

    def __bool__(self) -> bool:
        return bool(self.work)


class Scheduler:
    def __init__(self, block_manager: BlockManager, max_batch: int, token_budget: int):
        self.block_manager = block_manager
        self.max_batch = max_batch
        self.token_budget = token_budget
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> ScheduledBatch:
        batch = ScheduledBatch()
        budget = self._schedule_running(batch, self.token_budget)
        self._admit_waiting(batch, budget)
        batch.work.sort(key=lambda item: item[1] != 1)
        return batch

    def _schedule_running(self, batch: ScheduledBatch, budget: int) -> int:
        block_manager, work = self.block_manager, batch.work
        for seq in list(self.running):
            if seq.status is not SequenceStatus.RUNNING:
                continue  # preempted earlier in this loop
            count = seq.num_computable_tokens
            if count > 1:
                count = min(count, budget)
            if count <= 0:
                continue
            needed = block_manager.blocks_needed(seq, count)
            while needed > block_manager.num_free_blocks:
                victim = self.running[-1]
                self.preempt(victim)
                batch.preempted.append(victim)
                if victim is seq:
                    break
            else:
                if needed:
                    block_manager.allocate(seq, count)
                work.append((seq, count))
                budget -= count
        return budget

    def _admit_waiting(self, batch: ScheduledBatch, budget: int) -> None:
        for seq in list(self.waiting):
            if budget <= 0 or len(self.running) >= self.max_batch:
                return
            count = min(seq.num_computable_tokens, budget)
            if count == 0:
                continue  # waits for input chunks
            if not self.block_manager.can_allocate(seq, count):
                return
            self.block_manager.allocate(seq, count)
            self.waiting.remove(seq)
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            batch.work.append((seq, count))
            budget -= count

    def preempt(self, seq: Sequence) -> None:
        """Free `seq`'s cache and queue it first among the waiting, to be recomputed from its tokens."""
        self.running.remove(seq)
        self.block_manager.free(seq)
        self.num_preemptions += 1
        seq.num_computed_tokens = 0
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)

    def finish(self, seq: Sequence, reason: str) -> None:
        """Remove `seq` from the queues and free its cache at once."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
