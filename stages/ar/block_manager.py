"""Paged KV-cache bookkeeping: a free list of fixed-size blocks and each sequence's block table.

Pure Python (no tensors): the tensors live in `kv_cache.PagedKVCache`. Block 0 is reserved as the
null block that padded batch rows write to, so it is never handed out. Check/act pairs
(`can_allocate` / `allocate`) keep the scheduler's admission decisions separate from the action.
"""

from __future__ import annotations

from collections import deque

from stages.ar.sequence import Sequence

NULL_BLOCK = 0


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int):
        if num_blocks < 2:
            raise ValueError("the KV cache needs at least two blocks (one is the reserved null block)")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.free_blocks: deque[int] = deque(range(1, num_blocks))

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_blocks)

    @property
    def capacity_tokens(self) -> int:
        """The most tokens one sequence can hold (every block but the null block)."""
        return (self.num_blocks - 1) * self.block_size

    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        total = seq.num_computed_tokens + num_new_tokens
        return max(0, -(-total // self.block_size) - len(seq.block_table))

    def can_allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.blocks_needed(seq, num_new_tokens) <= self.num_free_blocks

    def allocate(self, seq: Sequence, num_new_tokens: int) -> None:
        """Grow `seq`'s block table to hold its computed tokens plus `num_new_tokens`."""
        for _ in range(self.blocks_needed(seq, num_new_tokens)):
            seq.block_table.append(self.free_blocks.popleft())

    def free(self, seq: Sequence) -> None:
        self.free_blocks.extend(seq.block_table)
        seq.block_table = []

    def slots(self, seq: Sequence, start: int, end: int) -> list[int]:
        """Physical cache slots of positions [start, end) of `seq`."""
        size, table = self.block_size, seq.block_table
        return [table[pos // size] * size + pos % size for pos in range(start, end)]
