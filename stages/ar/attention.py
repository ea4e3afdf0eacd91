"""Paged attention plugged into unmodified transformers models through `AttentionInterface`.

`register()` adds the attention implementation "omnistage_paged"; a model loaded with
`attn_implementation=ATTENTION_NAME` calls `paged_attention_forward` from every attention layer.
The model's forward receives one `AttentionBatch` as the keyword argument `ar_batch`; transformers
hands keyword arguments down to the attention function unchanged. Because the name has no mask
function registered, transformers builds no mask: the batch describes its own layout. Each
attention module reads its layer's cache tensors from its own `paged_kv` attribute
(`PagedKVCache.bind`), not by `layer_idx` from a list, so compiled code can share one graph between
layers (see `compiled_layers.py`).

A step packs all scheduled tokens into one row [1, T]: first `num_decodes` single-token decodes
(batched in one SDPA call over their gathered context), then the prefill chunks (one SDPA call
each, causal with the chunk's offset; prompts from position 0 packed as one chunk attend to their own
rows under the chunk's mask, see `prompt_graphs.py`). New keys and values are scattered into the cache at
`slot_mapping` before they are read, so a chunk attends to itself and to its cached prefix.
Every operation on the decode path has static shapes, so it can be captured in a CUDA graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from stages.ar.kv_cache import PagedKVCache

ATTENTION_NAME = "omnistage_paged"


@dataclass
class PrefillChunk:
    query_start: int
    query_len: int
    context_len: int
    block_table: torch.Tensor | None
    """[blocks] the sequence's cache blocks, covering positions 0..context_len-1; None: the context is
    the chunk's own rows (prompts from position 0 packed together, kept apart by `mask`)."""
    mask: torch.Tensor | None
    """[query_len, context_len] bool, or None when the chunk starts at position 0 (plain causal)."""


@dataclass
class AttentionBatch:
    kv_cache: PagedKVCache
    slot_mapping: torch.Tensor
    """[T] cache slot of every packed token (padded rows write to the null block)."""
    num_decodes: int = 0
    decode_block_tables: torch.Tensor | None = None
    """[num_decodes, B] cache blocks of each decode's context, padded with the null block."""
    decode_mask: torch.Tensor | None = None
    """[num_decodes, 1, 1, B * block_size] bool: which gathered positions are real context."""
    prefills: list[PrefillChunk] = field(default_factory=list)


def register(name: str = ATTENTION_NAME) -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(name, paged_attention_forward)


def use_paged_attention(text_model: torch.nn.Module, name: str = ATTENTION_NAME) -> None:
    """Give one already-built module (the autoregressive text part of a larger model) the paged
    attention; its siblings (audio and vision encoders) keep their own attention and masks. A part
    with a cache of its own inside a model whose engine binds the cache of the rest (a talker's code
    predictor) takes it under another `name`, so `paged_attention_modules` keeps the two apart."""
    register(name)
    text_model.config._attn_implementation = name


def paged_attention_modules(model: torch.nn.Module, name: str = ATTENTION_NAME) -> list[torch.nn.Module]:
    """The attention modules of `model` that run the paged attention under `name` (each knows its `layer_idx`)."""
    return [
        module
        for module in model.modules()
        if getattr(module, "layer_idx", None) is not None
        and getattr(getattr(module, "config", None), "_attn_implementation", None) == name
    ]


def paged_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    ar_batch: AttentionBatch | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """query [1, H, T, D], key/value [1, KVH, T, D] -> ([1, T, H, D], None)."""
    if ar_batch is None:
        raise RuntimeError(f"{ATTENTION_NAME} attention needs the `ar_batch` keyword argument")
    keys, values = module.paged_kv
    keys.index_copy_(0, ar_batch.slot_mapping, key[0].transpose(0, 1).to(keys.dtype))
    values.index_copy_(0, ar_batch.slot_mapping, value[0].transpose(0, 1).to(values.dtype))

    queries = query[0]  # [H, T, D]
    groups = queries.shape[0] // keys.shape[1]
    pieces = []
    if ar_batch.num_decodes:
        pieces.append(_decode_attention(queries, keys, values, ar_batch, groups, scaling))
    for chunk in ar_batch.prefills:
        if chunk.block_table is None:
            rows = slice(chunk.query_start, chunk.query_start + chunk.query_len)
            context = key[0, :, rows], value[0, :, rows]  # [KVH, q, D]: the chunk's own rows
        else:
            context = _cached_context(keys, values, chunk, ar_batch.kv_cache.block_size)
        pieces.append(_prefill_attention(queries, *context, chunk, groups, scaling))
    output = pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=0)
    return output.unsqueeze(0), None


def _decode_attention(queries, keys, values, batch: AttentionBatch, groups: int, scaling) -> torch.Tensor:
    """Single-token queries against their gathered context: one SDPA call for the whole group.

    The query heads that share a KV head become that head's "query rows" ([N, KVH, G, D]); all are
    at the same position, so the padding mask is the only mask and KV heads are never expanded.
    """
    count, heads, dim = batch.num_decodes, queries.shape[0], queries.shape[2]
    q = queries[:, :count].transpose(0, 1).reshape(count, heads // groups, groups, dim)
    block_size = batch.kv_cache.block_size
    k = _gather_blocks(keys, batch.decode_block_tables, block_size).transpose(1, 2)  # [N, KVH, L, D]
    v = _gather_blocks(values, batch.decode_block_tables, block_size).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=batch.decode_mask, scale=scaling)
    return out.reshape(count, heads, dim)  # [N, H, D]


def _cached_context(keys, values, chunk: PrefillChunk, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunk's context read from the cache: ([KVH, ctx, D], [KVH, ctx, D])."""
    return _context(keys, chunk, block_size).transpose(0, 1), _context(values, chunk, block_size).transpose(0, 1)


def _prefill_attention(queries, keys, values, chunk: PrefillChunk, groups: int, scaling) -> torch.Tensor:
    """queries [H, T, D] of the step, keys/values [KVH, ctx, D] of the chunk's context -> [q, H, D].
    SDPA's fused kernels (flash, memory-efficient) take 4-D inputs only: 3-D ones run its math path."""
    q = queries[None, :, chunk.query_start : chunk.query_start + chunk.query_len]  # [1, H, q, D]
    k, v = _expand_heads(keys, groups)[None], _expand_heads(values, groups)[None]  # [1, H, ctx, D]
    if chunk.mask is None:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling)
    else:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=chunk.mask, scale=scaling)
    return out[0].transpose(0, 1)  # [q, H, D]


def _gather_blocks(cache: torch.Tensor, block_tables: torch.Tensor, block_size: int) -> torch.Tensor:
    """[slots, KVH, D] cache, [N, B] block ids -> [N, B * block_size, KVH, D] (whole blocks: cheap to index)."""
    blocks = cache.view(-1, block_size, *cache.shape[1:])
    gathered = blocks.index_select(0, block_tables.reshape(-1))
    return gathered.view(block_tables.shape[0], -1, *cache.shape[1:])


def _context(cache: torch.Tensor, chunk: PrefillChunk, block_size: int) -> torch.Tensor:
    blocks = cache.view(-1, block_size, *cache.shape[1:]).index_select(0, chunk.block_table)
    return blocks.view(-1, *cache.shape[1:])[: chunk.context_len]  # [ctx, KVH, D]


def _expand_heads(states: torch.Tensor, groups: int) -> torch.Tensor:
    """Repeat KV heads for grouped-query attention; heads are dim -3."""
    return states if groups == 1 else states.repeat_interleave(groups, dim=-3)
