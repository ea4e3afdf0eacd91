"""The KV cache tensors: per layer, keys and values as [num_slots, kv_heads, head_dim].

Sized once at start from a memory budget (`StageDeployConfig.kv_memory_mb`) and never grown. A
slot is `block_id * block_size + offset`; `BlockManager` decides which blocks a sequence owns.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class KVCacheShape:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype

    @property
    def bytes_per_token(self) -> int:
        element = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * element

    def num_blocks_for(self, memory_bytes: int, block_size: int) -> int:
        return memory_bytes // (self.bytes_per_token * block_size)


class PagedKVCache:
    def __init__(self, shape: KVCacheShape, num_blocks: int, block_size: int, device: torch.device | str):
        self.shape = shape
        self.block_size = block_size
        self.num_slots = num_blocks * block_size
        dims = (self.num_slots, shape.num_kv_heads, shape.head_dim)
        self.keys = [torch.zeros(dims, dtype=shape.dtype, device=device) for _ in range(shape.num_layers)]
        self.values = [torch.zeros(dims, dtype=shape.dtype, device=device) for _ in range(shape.num_layers)]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)

    def bind(self, attention_modules: list[torch.nn.Module]) -> None:
        """Give each attention module its layer's (keys, values) as `paged_kv`."""
        if len(attention_modules) != self.shape.num_layers:
            raise RuntimeError(
                f"the model has {len(attention_modules)} paged attention modules for {self.shape.num_layers} cache layers"
            )
        for module in attention_modules:
            module.paged_kv = (self.keys[module.layer_idx], self.values[module.layer_idx])
