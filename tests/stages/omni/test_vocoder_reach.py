"""Qwen2.5-Omni token2wav's BigVGAN decodes a window with VOCODER_REACH_MEL mel frames around it, not the
DiT's whole left context: a mel frame that far from a window leaves its samples unchanged, so the
window's audio is the same and BigVGAN reads fewer frames."""

from __future__ import annotations

import types

import numpy as np

from stages.config import StageDeployConfig
from stages.generation.engine import CodeStream, Window
from stages.generation.token2wav import MEL_SAMPLES, VOCODER_REACH_MEL, vocoder_reach
from stages.protocol import StageRequest


def _decoder(model_dir):
    from stages.models.qwen2_5_omni import build_token2wav

    return build_token2wav(model_dir, StageDeployConfig(max_length=256)).decoder


def test_a_mel_frame_beyond_the_reach_leaves_a_windows_samples_unchanged(omni_models):
    import torch

    bigvgan = _decoder(omni_models["qwen2_5_omni"]).bigvgan
    first, last = 60, 80
    mel = torch.randn(1, 80, 140, generator=torch.Generator().manual_seed(0))

    def window_samples(changed_frame: int | None):
        changed = mel.clone()
        if changed_frame is not None:
            changed[:, :, changed_frame] += 5.0
        with torch.no_grad():
            return bigvgan(changed).reshape(-1)[first * MEL_SAMPLES : last * MEL_SAMPLES]

    unchanged = window_samples(None)
    for frame in (first - VOCODER_REACH_MEL, last - 1 + VOCODER_REACH_MEL):
        assert torch.equal(window_samples(frame), unchanged)
    for frame in (first - VOCODER_REACH_MEL + 6, last - 1 + VOCODER_REACH_MEL - 6):
        assert not torch.equal(window_samples(frame), unchanged)


def test_a_window_decodes_the_same_audio_from_fewer_mel_frames(omni_models):
    decoder = _decoder(omni_models["qwen2_5_omni"])
    assert decoder.vocoder_reach == VOCODER_REACH_MEL
    assert (
        vocoder_reach(types.SimpleNamespace(**{**vars(decoder.bigvgan.config), "upsample_rates": [8, 5, 4, 3]})) is None
    )
    read = []
    bigvgan = decoder.bigvgan
    decoder.bigvgan = lambda mel: read.append(mel.shape[-1]) or bigvgan(mel)
    codes = np.random.default_rng(0).integers(0, decoder.num_codes, size=200).tolist()
    stream = CodeStream("a", decoder.open(StageRequest(request_id="a")), codes)
    windows = [Window(stream, 100, 148, final=False), Window(stream, 148, 200, final=True)]

    cropped = [decoder.decode([window])[0] for window in windows]
    decoder.vocoder_reach = None
    whole = [decoder.decode([window])[0] for window in windows]

    spans = [decoder._span(window) for window in windows]  # the DiT's: 48 codes of left context, 12 ahead
    assert read[2:] == [2 * (b - a) for a, b in spans]
    # BigVGAN's: the reach (28 mel frames = 14 codes) on the left; on the right the look-ahead (24) is less
    assert read[:2] == [2 * (148 + 12 - 100) + VOCODER_REACH_MEL, 2 * (200 - 148) + VOCODER_REACH_MEL]
    assert all(ours < whole for ours, whole in zip(read[:2], read[2:], strict=True))
    for ours, reference in zip(cropped, whole, strict=True):
        assert ours.shape == reference.shape
        np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-6 * np.abs(reference).max())
