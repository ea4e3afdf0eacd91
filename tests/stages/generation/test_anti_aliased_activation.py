"""BigVGAN's anti-aliased SnakeBeta from shifted slices equals transformers' module (padding, polyphase
upsampling, crop, downsampling) at any length, and a BigVGAN with every activation fused makes the same
audio."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2_5OmniBigVGANConfig
from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import (
    Qwen2_5OmniAntiAliasedActivation1d,
    Qwen2_5OmniSnakeBeta,
    Qwen2_5OmniToken2WavBigVGANModel,
)

from stages.generation.anti_aliased_activation import fuse_activations, unfuse_activations


@pytest.mark.parametrize(("channels", "length"), [(3, 1), (3, 5), (8, 37), (24, 1000)])
def test_the_activation_from_slices_equals_the_modules(channels, length):
    torch.manual_seed(channels + length)
    module = Qwen2_5OmniAntiAliasedActivation1d(Qwen2_5OmniSnakeBeta(channels))
    with torch.no_grad():
        module.act.alpha.normal_()
        module.act.beta.normal_()
    hidden_states = 3 * torch.randn(2, channels, length)
    expected = module(hidden_states)
    assert fuse_activations(module, compile=False) == 1
    ours = module(hidden_states)  # the fused forward, not the class's
    assert ours.shape == expected.shape == (2, channels, length)
    assert torch.allclose(ours, expected, rtol=1e-5, atol=1e-5)


def test_a_bigvgan_with_its_activations_fused_makes_the_same_audio():
    torch.manual_seed(0)
    config = Qwen2_5OmniBigVGANConfig(
        mel_dim=16, upsample_initial_channel=32, upsample_rates=[5, 3, 2], upsample_kernel_sizes=[11, 7, 4]
    )
    bigvgan = Qwen2_5OmniToken2WavBigVGANModel(config).eval()
    mel = torch.randn(2, 16, 20)
    with torch.no_grad():
        expected = bigvgan(mel)
        fused = fuse_activations(bigvgan, compile=False)
        ours = bigvgan(mel)
        unfuse_activations(bigvgan)
        again = bigvgan(mel)
    assert fused == 3 * 6 * 3 + 1  # three AMP blocks of six activations per upsampling, and the last one
    assert torch.allclose(ours, expected, rtol=1e-5, atol=1e-6)
    assert torch.equal(again, expected)
