"""The DiT's attention block by block (no mask) computes transformers' masked attention: a whole DiT
forward at lengths of whole blocks, of a partial last block and of less than one block, with layers
that see only their own block and layers that see one block ahead or behind."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2_5OmniDiTConfig
from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import Qwen2_5OmniToken2WavDiTModel

from stages.generation.block_attention import ATTENTION, use_block_attention, use_transformers_attention


def _dit() -> Qwen2_5OmniToken2WavDiTModel:
    torch.manual_seed(0)
    config = Qwen2_5OmniDiTConfig(
        hidden_size=128, num_hidden_layers=4, num_attention_heads=2, head_dim=64, ff_mult=2, emb_dim=32,
        num_embeds=64, mel_dim=16, repeats=2, block_size=24, look_ahead_layers=[1], look_backward_layers=[0],
        enc_channels=[32, 32, 32, 32, 96], enc_dim=32, enc_emb_dim=16, enc_attention_channels=16,
        attn_implementation="sdpa",
    )  # fmt: skip
    return Qwen2_5OmniToken2WavDiTModel(config).eval()


def _forward(dit, codes: int):
    generator = torch.Generator().manual_seed(codes)
    return dit(
        hidden_states=torch.randn(2, 2 * codes, 16, generator=generator),
        condition_vector=torch.randn(2, 30, 16, generator=generator),
        speaker_embedding=torch.randn(2, 2 * codes, 16, generator=generator),
        quantized_code=torch.randint(0, 64, (2, codes), generator=generator),
        time_step=torch.tensor(0.3),
        apply_cfg=True,
    )


@pytest.mark.parametrize("codes", [5, 24, 41])  # 10 mel frames, 2 whole blocks, 3 blocks and 10 frames
def test_a_dit_forward_with_block_attention_equals_transformers(codes, monkeypatch):
    from stages.generation import block_attention

    calls = []
    attend = block_attention.block_attention
    monkeypatch.setattr(block_attention, "block_attention", lambda *args, **kw: calls.append(1) or attend(*args, **kw))
    dit = _dit()
    assert [(layer.look_backward_block, layer.look_ahead_block) for layer in dit.transformer_blocks] == [
        (1, 0), (0, 1), (0, 0), (0, 0)
    ]  # fmt: skip
    with torch.no_grad():
        expected = _forward(dit, codes)
        use_block_attention(dit)
        ours = _forward(dit, codes)
        assert len(calls) == len(dit.transformer_blocks)  # every layer attended block by block
        use_transformers_attention(dit)
        again = _forward(dit, codes)
    assert len(calls) == len(dit.transformer_blocks)
    assert ours.shape == expected.shape == (4, 2 * codes, 16)
    assert torch.allclose(ours, expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(again, expected)
    assert dit.config._attn_implementation != ATTENTION


def test_compiled_blocks_attend_block_by_block_at_every_length():
    """Block attention inside the compiled blocks (`compile_dit_blocks`, dynamic shapes): lengths with
    and without a partial last block give transformers' outputs."""
    from stages.generation.token2wav import compile_dit_blocks

    dit = _dit()
    with torch.no_grad():
        expected = {codes: _forward(dit, codes) for codes in (24, 41)}
        use_block_attention(dit)
        compile_dit_blocks(dit)
        assert dit.config._attn_implementation == ATTENTION
        compiled = {codes: _forward(dit, codes) for codes in (24, 41)}
    for codes, output in compiled.items():
        assert torch.allclose(output, expected[codes], rtol=1e-4, atol=1e-4), codes
