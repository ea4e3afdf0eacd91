"""Custom voices on the tiny Qwen2.5-Omni: the conditioning derived from a reference clip (the clip's
log-mel as the vocoder's front-end computes it, the nearest built-in speaker's embedding and bos token)
survives the wire, and code2wav decodes with it, not with a built-in speaker's, when a request carries it."""

from __future__ import annotations

import numpy as np
import pytest

from stages.config import StageDeployConfig
from stages.diffusion_knobs import DiffusionKnobs
from stages.protocol import RequestOptions, StageRequest, decoder, encode
from stages.tensors import from_wire, to_numpy
from stages.voice_conditioning import PARAM, conditioning_of, conditioning_params

pytestmark = pytest.mark.slow


def voiced_clip(seconds: float, rate: int, f0: float = 140.0) -> np.ndarray:
    """A vowel-like signal: eight harmonics of a slightly wavering pitch, with a fade in and out."""
    t = np.arange(int(seconds * rate)) / rate
    phase = 2 * np.pi * f0 * (t + 0.02 * np.sin(2 * np.pi * 3 * t))
    signal = sum(np.sin(k * phase) / k for k in range(1, 9))
    fade = np.minimum(1.0, np.minimum(t, t[-1] - t) / 0.05)
    return (0.2 * signal * fade).astype(np.float32)


def test_the_reference_mel_is_the_vocoders_log_mel_at_24_khz():
    from transformers.audio_utils import mel_filter_bank

    from stages.models.qwen2_5_voice_reference import reference_mel

    rate, tone = 24000, 1000.0
    samples = (0.5 * np.sin(2 * np.pi * tone * np.arange(rate) / rate)).astype(np.float32)
    mel = reference_mel(samples, rate, mel_dim=80, hop=240)
    frames = (rate + 2 * 392 - 1024) // 240 + 1  # reflect-padded by (1024 - 240) / 2: one frame per 240 samples
    assert mel.shape == (1, frames, 80) and mel.dtype == np.float32
    basis = mel_filter_bank(513, 80, 0.0, 12000.0, rate, norm="slaney", mel_scale="slaney")
    assert int(np.argmax(mel[0, 50])) == int(np.argmax(basis[round(tone / rate * 1024)]))  # the tone's band
    assert mel.min() >= np.log(1e-5) - 1e-6
    resampled = reference_mel(samples[::3].copy(), 8000, mel_dim=80, hop=240)  # the same tone at 8 kHz
    assert abs(resampled.shape[1] - mel.shape[1]) <= 1
    assert int(np.argmax(resampled[0, 50])) == int(np.argmax(mel[0, 50]))


def test_the_derived_conditioning_is_the_nearest_speakers_with_the_clips_mel(repo_tiny_models):
    from stages.models.qwen2_5_omni import family, speakers
    from stages.models.qwen2_5_voice_reference import centre, derive, min_seconds, reference_mel

    model = str(repo_tiny_models / "qwen2_5_omni")
    clip = voiced_clip(4.0, 16000)
    derived = family.voice_reference(model, clip, 16000)
    assert derived == derive(model, clip, 16000)  # deterministic
    builtin = speakers(model)
    assert derived.nearest in builtin
    nearest = builtin[derived.nearest]
    assert derived.bos_token == int(nearest["bos_token"])
    np.testing.assert_array_equal(to_numpy(derived.cond), nearest["cond"].float().numpy())
    # The reference keeps the built-in voices' length: the middle of the clip's mel.
    assert to_numpy(derived.ref_mel).shape == tuple(nearest["ref_mel"].shape) == (1, 300, 80)
    whole = reference_mel(clip, 16000, mel_dim=80, hop=240)
    np.testing.assert_array_equal(to_numpy(derived.ref_mel), centre(whole, 300))
    assert whole.shape[1] > 300 and min_seconds(model) == family.voice_reference_min_s(model) == 3.0
    with pytest.raises(ValueError, match="needs 300"):
        derive(model, voiced_clip(2.0, 16000), 16000)


def test_code2wav_decodes_with_the_conditioning_the_request_carries(repo_tiny_models):
    from stages.models.qwen2_5_omni import build_token2wav
    from stages.models.qwen2_5_voice_reference import derive

    model = str(repo_tiny_models / "qwen2_5_omni")
    derived = derive(model, voiced_clip(3.5, 24000, f0=220.0), 24000)
    wire = encode(StageRequest(request_id="x", options=RequestOptions(voice="mine"),
                               params={PARAM: conditioning_params(derived)}))  # fmt: skip
    sent = decoder(StageRequest).decode(wire)  # as a replica reads it off its stream
    params = sent.params
    assert conditioning_of(params) == derived and sent.options.voice == "mine"

    deploy = StageDeployConfig(
        max_batch=2, max_length=256, options={"token2wav_cuda_graphs": False, "token2wav_warm_up": False}
    )
    engine = build_token2wav(model, deploy)
    cond, ref_mel = engine.decoder.speaker_of(sent)
    np.testing.assert_array_equal(cond.numpy(), to_numpy(derived.cond))
    np.testing.assert_array_equal(ref_mel.numpy(), to_numpy(derived.ref_mel))
    opened = engine.decoder.open(sent)
    np.testing.assert_array_equal(opened["ref_mel"].float().numpy(), from_wire(derived.ref_mel).numpy())

    codes = np.random.default_rng(5).integers(0, 8192, size=24).tolist()

    def speak(request_id: str, voice: str, request_params: dict) -> np.ndarray:
        request = StageRequest(request_id=request_id, stage_id=2, prompt_token_ids=codes,
                               options=RequestOptions(voice=voice, diffusion=DiffusionKnobs(seed=3)),
                               params=request_params)  # fmt: skip
        engine.add_request(request)
        chunks = []
        while engine.has_unfinished():
            for output in engine.step():
                assert output.error is None, output.error
                chunks.append(to_numpy(output.payloads["audio"]))
        return np.concatenate(chunks)

    builtin_opened = engine.decoder.open(StageRequest(request_id="y", options=RequestOptions(voice=derived.nearest)))
    assert builtin_opened["ref_mel"].shape == opened["ref_mel"].shape  # their windows batch together
    custom, builtin = speak("custom", "mine", params), speak("builtin", derived.nearest, {})
    # Same codes, seed and speaker embedding: only the reference differs (the random tiny vocoder is quiet).
    assert custom.shape == builtin.shape
    assert np.abs(custom - builtin).max() > 1e-4 * np.abs(builtin).max() > 0
