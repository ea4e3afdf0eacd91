"""The paged attention's prefill chunks run SDPA's fused kernel, not its float32 fallback.

SDPA takes its fused kernels (flash, memory-efficient, cuDNN) only for 4-D inputs; with 3-D ones it
falls back to the math path, which on a GPU upcasts to float32 and launches a matmul, a mask and a
softmax per chunk and layer. Restricted to the flash kernel, a 3-D call raises "No available kernel".
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from stages.ar.attention import AttentionBatch, PrefillChunk, paged_attention_forward
from stages.ar.kv_cache import KVCacheShape, PagedKVCache

HEADS, KV_HEADS, DIM, BLOCK = 4, 2, 16, 4


class _Layer(torch.nn.Module):
    def __init__(self, cache: PagedKVCache):
        super().__init__()
        self.paged_kv = (cache.keys[0], cache.values[0])


def _reference(queries, keys, values, start: int) -> torch.Tensor:
    """[H, q, D] queries at positions start.. over [KVH, ctx, D] keys/values, causal -> [q, H, D]."""
    keys, values = (t.repeat_interleave(HEADS // KV_HEADS, dim=0) for t in (keys, values))
    scores = queries @ keys.transpose(1, 2) / DIM**0.5
    positions = torch.arange(start, start + queries.shape[1]).unsqueeze(1)
    scores = scores.masked_fill(torch.arange(keys.shape[1]).unsqueeze(0) > positions, float("-inf"))
    return (scores.softmax(-1) @ values).transpose(0, 1)


@pytest.mark.parametrize("split", [0, 5], ids=["whole-prompt", "second-chunk"])
def test_prefill_chunks_run_the_fused_kernel_and_attend_causally_to_their_prefix(split):
    torch.manual_seed(0)
    cache = PagedKVCache(KVCacheShape(1, KV_HEADS, DIM, torch.float32), num_blocks=4, block_size=BLOCK, device="cpu")
    layer, table = _Layer(cache), torch.tensor([2, 0, 3])
    length = 9
    queries, keys, values = (
        torch.randn(HEADS, length, DIM),
        torch.randn(KV_HEADS, length, DIM),
        torch.randn(KV_HEADS, length, DIM),
    )
    slots = torch.tensor([int(table[p // BLOCK]) * BLOCK + p % BLOCK for p in range(length)])
    outputs = []
    for start, end in [(0, split), (split, length)] if split else [(0, length)]:
        positions = torch.arange(start, end)
        mask = None if start == 0 else torch.arange(end).unsqueeze(0) <= positions.unsqueeze(1)
        chunk = PrefillChunk(query_start=0, query_len=end - start, context_len=end,
                             block_table=table[: -(-end // BLOCK)], mask=mask)  # fmt: skip
        batch = AttentionBatch(kv_cache=cache, slot_mapping=slots[start:end], prefills=[chunk])
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            output, _ = paged_attention_forward(
                layer, queries[None, :, start:end], keys[None, :, start:end], values[None, :, start:end],
                None, scaling=DIM**-0.5, ar_batch=batch,
            )  # fmt: skip
        outputs.append(output[0])
    torch.testing.assert_close(torch.cat(outputs), _reference(queries, keys, values, 0), rtol=1e-4, atol=1e-5)
