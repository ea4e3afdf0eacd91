"""The token2wav DiT's attention block by block, without a mask.

Qwen2.5-Omni's DiT attends in blocks of `block_size` mel frames (24): in every layer a frame sees
the frames of its own block, and in three layers (`look_ahead_layers`, `look_backward_layers`) those
of one block ahead or behind too. transformers writes that as a [batch, heads, T, T] boolean mask
that each layer builds from the DiT's block differences and SDPA turns into an additive bias, and
the attention then runs over all T keys. Profiled on an H100 (16 windows of 164 codes, compiled
blocks, `benchmarks/token2wav_windows.py --profile`), building those masks took 110 ms of the DiT's
585 ms of device time per decode, and the masked attention over all keys another 98 ms.

With `use_block_attention(dit)`, a layer that sees only its own block runs SDPA on each block alone
(the frames as [batch x blocks, heads, block, head_dim], a last partial block on its own), with no
mask; the other layers get their mask as [T, T], broadcast over batch and heads. A softmax over a
block's keys equals the masked softmax over all keys (the masked terms are exact zeros), so the
result is transformers' up to the order of floating-point sums. `use_transformers_attention(dit)`
puts transformers' back.
"""

from __future__ import annotations

import functools

ATTENTION = "omnistage_dit_blocks"


def use_block_attention(dit) -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, block_attention)
    if dit.config._attn_implementation != ATTENTION:
        dit.transformers_attention = dit.config._attn_implementation
    for layer in dit.transformer_blocks:
        layer.attn.block_band = (dit.block_size, layer.look_backward_block, layer.look_ahead_block)
    dit.config._attn_implementation = ATTENTION
    dit._create_block_diff = functools.partial(block_differences, dit.block_size)


def use_transformers_attention(dit) -> None:
    if dit.config._attn_implementation == ATTENTION:
        dit.config._attn_implementation = dit.transformers_attention
    dit.__dict__.pop("_create_block_diff", None)


def block_differences(block_size: int, hidden_states):
    """[T, T]: the block of key j minus the block of query i (transformers' `_create_block_diff`
    before it is expanded over batch and heads)."""
    import torch

    blocks = torch.arange(hidden_states.shape[1], device=hidden_states.device) // block_size
    return blocks[None, :] - blocks[:, None]


def block_attention(module, query, key, value, attention_mask, **kwargs):
    """An `AttentionInterface` function for the DiT's attention: query, key and value
    [batch, heads, T, head_dim] -> [batch, T, heads, head_dim], as transformers' SDPA returns it."""
    import torch
    import torch.nn.functional as F

    block, behind, ahead = module.block_band
    if behind or ahead:
        output = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask)
        return output.transpose(1, 2).contiguous(), None
    batch, heads, length, dim = query.shape
    whole = length // block * block
    parts = []
    if whole:
        attended = F.scaled_dot_product_attention(*(_blocks(t[:, :, :whole], block) for t in (query, key, value)))
        parts.append(attended.reshape(batch, whole // block, heads, block, dim).transpose(2, 3))
    if whole < length:
        tail = F.scaled_dot_product_attention(query[:, :, whole:], key[:, :, whole:], value[:, :, whole:])
        parts.append(tail.transpose(1, 2))
    frames = [part.reshape(batch, -1, heads, dim) for part in parts]
    return (frames[0] if len(frames) == 1 else torch.cat(frames, dim=1)), None


def _blocks(tensor, block: int):
    """[batch, heads, blocks x block, dim] -> [batch x blocks, heads, block, dim]."""
    batch, heads, length, dim = tensor.shape
    return tensor.reshape(batch, heads, length // block, block, dim).transpose(1, 2).reshape(-1, heads, block, dim)
