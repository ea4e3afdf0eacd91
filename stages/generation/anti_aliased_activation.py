"""BigVGAN's anti-aliased SnakeBeta activation as one fused computation.

Every BigVGAN block of Qwen2.5-Omni's token2wav (108 of them, plus the one before the last
convolution) upsamples its input by 2 (replicate padding, a depthwise transposed convolution with
a 12-tap Kaiser-sinc filter, a crop), applies SnakeBeta (`x + sin(x * e^alpha)^2 / e^beta`) and
downsamples by 2 (replicate padding, a depthwise strided convolution). Run as transformers writes
it, that is about ten kernels per activation, each reading and writing the twice-upsampled tensor,
and PyTorch runs the depthwise transposed convolution through a generic path (on CPU the transposed
convolutions, these 109 and the six upsampling layers, take about a third of the tiny model's
BigVGAN time in torch.profiler).

`anti_aliased_activation` computes the same values from shifted slices of the input: the upsampled
signal's even and odd samples are each a 6-tap weighted sum of the padded input (the transposed
convolution's two polyphase components), and the downsampled output is a 12-tap weighted sum of
every other sample of the padded SnakeBeta output. Written so, an activation is elementwise
arithmetic on shifted views that torch.compile fuses into two kernels: the upsampled SnakeBeta
(twice the input's length, written once) and the downsampling. `fuse_activations`
puts the compiled function in place of the forward of every such activation of a BigVGAN (and
`unfuse_activations` takes it out again); activations of another shape keep their own forward.
"""

from __future__ import annotations

import functools

RATIO = 2


def anti_aliased_activation(hidden_states, up_filter, down_filter, log_alpha, log_beta, eps: float):
    """`Qwen2_5OmniAntiAliasedActivation1d.forward` (ratio 2 both ways, even filter lengths) for
    `hidden_states` [batch, channels, time]: the same arithmetic term by term, without convolutions."""
    return downsampled(snake_upsampled(hidden_states, up_filter, log_alpha, log_beta, eps), down_filter)


def snake_upsampled(hidden_states, up_filter, log_alpha, log_beta, eps: float):
    """SnakeBeta of the input upsampled by 2: [batch, channels, 2 x time]."""
    upsampled = _upsampled(hidden_states, up_filter, hidden_states.shape[-1])
    alpha = log_alpha.exp()[None, :, None]
    beta = log_beta.exp()[None, :, None]
    return upsampled + (1.0 / (beta + eps)) * (upsampled * alpha).sin().pow(2)


def downsampled(snake, down_filter):
    """Every other sample of the replicate-padded signal filtered by `down_filter`: [batch, channels, time]."""
    import torch.nn.functional as F

    taps = down_filter.shape[-1]
    padded = F.pad(snake, (taps // 2 - 1, taps // 2), mode="replicate")
    length = snake.shape[-1] // RATIO
    return sum(padded[..., k : k + RATIO * length : RATIO] * down_filter[k] for k in range(taps))


def _upsampled(hidden_states, up_filter, length: int):
    """The transposed convolution's output cropped to 2 x `length` samples, phase by phase: sample
    2t + p is `RATIO` x sum_j filter[2j + q] x padded[t + c - j], where q and c follow from the crop."""
    import torch
    import torch.nn.functional as F

    taps = up_filter.shape[-1]
    pad = taps // RATIO - 1
    crop = pad * RATIO + (taps - RATIO) // 2
    padded = F.pad(hidden_states, (pad, pad), mode="replicate")
    phases = []
    for phase in range(RATIO):
        parity = (phase + crop) % RATIO
        offset = (phase + crop - parity) // RATIO
        phases.append(
            sum(
                padded[..., offset - j : offset - j + length] * up_filter[RATIO * j + parity]
                for j in range(taps // RATIO)
            )
        )
    return RATIO * torch.stack(phases, dim=-1).flatten(-2)


def fusable(activation) -> bool:
    """Whether `activation` is the anti-aliased SnakeBeta this module computes (ratio 2, even filters)."""
    from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import (
        Qwen2_5OmniAntiAliasedActivation1d,
        Qwen2_5OmniSnakeBeta,
    )

    if not isinstance(activation, Qwen2_5OmniAntiAliasedActivation1d):
        return False
    up, down = activation.upsample, activation.downsample
    return (
        isinstance(activation.act, Qwen2_5OmniSnakeBeta)
        and up.ratio == RATIO
        and down.stride == RATIO
        and up.kernel_size % 2 == 0
        and down.kernel_size % 2 == 0
    )


def fuse_activations(bigvgan, *, compile: bool = True) -> int:  # noqa: A002 - torch's own word for it
    """Each fusable activation of `bigvgan` runs `anti_aliased_activation` (through torch.compile with
    dynamic shapes unless `compile` is false: every channel count and length shares its kernels).
    Returns how many activations were fused."""
    function = _compiled() if compile else anti_aliased_activation
    fused = 0
    for activation in bigvgan.modules():
        if fusable(activation):
            activation.forward = functools.partial(_forward, function, activation)
            fused += 1
    return fused


def unfuse_activations(bigvgan) -> None:
    for activation in bigvgan.modules():
        activation.__dict__.pop("forward", None)  # the class's own forward again


def _forward(function, activation, hidden_states):
    return function(
        hidden_states,
        activation.upsample.filter.reshape(-1),
        activation.downsample.filter.reshape(-1),
        activation.act.alpha,
        activation.act.beta,
        activation.act.no_div_by_zero,
    )


@functools.cache
def _compiled():
    """Two compiled functions, the upsampled SnakeBeta written out between them. Compiled as one,
    Inductor fused SnakeBeta into the downsampling, so every output sample recomputed the twelve
    SnakeBeta values its filter reads (on an H100, at 16 windows of 164 codes, that kernel took
    ~0.9 ms per activation, nearly half of BigVGAN's device time)."""
    import torch

    upsample = torch.compile(snake_upsampled, dynamic=True)
    downsample = torch.compile(downsampled, dynamic=True)

    def activation(hidden_states, up_filter, down_filter, log_alpha, log_beta, eps):
        return downsample(upsample(hidden_states, up_filter, log_alpha, log_beta, eps), down_filter)

    return activation
