"""Qwen2.5-Omni's speaker conditioning derived from a reference clip (a custom voice).

A built-in speaker of spk_dict.pt is three things: the talker's `bos_token` (a row of the thinker's
embedding the talker's prompt carries), token2wav's speaker embedding `cond` [1, enc_emb_dim] and
its reference mel `ref_mel` [1, frames, mel_dim]. From a clip:

- `ref_mel` is the clip's mel as the model's own mel front-end computes it: the log-mel space
  BigVGAN decodes (its input, `process_mel_spectrogram`, is a natural-log magnitude mel), at the
  vocoder's rate (24 kHz) and hop (the product of BigVGAN's upsample rates: 240 samples, so one
  mel frame per DiT frame), an `N_FFT`-point periodic Hann STFT with the signal reflect-padded by
  (N_FFT - hop) / 2 on each side, `mel_dim` Slaney mel bands from 0 Hz to Nyquist, log of the
  magnitude clamped at 1e-5. The clip is resampled to 24 kHz first (stages/resampling.py). The
  reference keeps the built-in voices' length (`reference_frames`: 300 frames, 3 s), the middle of
  a longer clip: the DiT reads the reference only through its speaker encoder, which pools over
  time, and one length lets token2wav batch a custom voice's windows with the built-in voices' and
  reuse their CUDA graphs (`batch_key` and the graphs' shapes include the reference's length). A
  clip shorter than that (`min_seconds`) is refused.
- `cond` and `bos_token`: the checkpoint has no encoder for them (the speaker embedding was made
  by an external speaker-verification model, and the talker knows its speakers only by their bos
  tokens), so they are the nearest built-in voice's. Nearest is measured with the model's own
  speaker encoder, the DiT's ECAPA-TDNN (`input_embed.spk_encoder`): the built-in voice whose
  reference mel it encodes closest (cosine) to the clip's. Without weights in the checkpoint (a
  configs-only directory) the default voice is taken.
"""

from __future__ import annotations

import math

import numpy as np

from stages.errors import ConfigError
from stages.protocol import Tensor
from stages.resampling import resample
from stages.tensors import to_wire
from stages.voice_conditioning import VoiceConditioning

SAMPLE_RATE = 24000
N_FFT = 1024
LOG_FLOOR = 1e-5
SPEAKER_ENCODER = "token2wav.code2wav_dit_model.input_embed.spk_encoder."


def reference_mel(samples: np.ndarray, sample_rate: int, *, mel_dim: int, hop: int) -> np.ndarray:
    """The clip's log-mel [1, frames, mel_dim] (float32), one frame per `hop` samples at 24 kHz."""
    from transformers.audio_utils import mel_filter_bank

    signal = np.asarray(samples, dtype=np.float32).reshape(-1)
    if int(sample_rate) != SAMPLE_RATE:
        signal = resample(signal, int(sample_rate), SAMPLE_RATE)
    pad = (N_FFT - hop) // 2
    if signal.shape[0] <= pad:
        raise ValueError(f"a reference clip needs more than {pad} samples at {SAMPLE_RATE} Hz")
    padded = np.pad(signal, (pad, pad), mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::hop]
    window = 0.5 - 0.5 * np.cos(2 * math.pi * np.arange(N_FFT) / N_FFT)  # periodic Hann, as torch's
    magnitude = np.abs(np.fft.rfft(frames * window, axis=-1))
    basis = mel_filter_bank(N_FFT // 2 + 1, mel_dim, 0.0, SAMPLE_RATE / 2, SAMPLE_RATE, norm="slaney",
                            mel_scale="slaney")  # fmt: skip
    mel = np.log(np.maximum(magnitude @ basis, LOG_FLOOR))
    return mel.astype(np.float32)[None]


def nearest_voice(model_dir: str, dit_config, ref_mel: np.ndarray, speakers: dict, default: str) -> str:
    """The built-in voice whose reference mel the DiT's speaker encoder puts closest to `ref_mel`."""
    import torch
    from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import ECAPA_TimeDelayNet

    from stages.models.omni_weights import load_state

    try:
        state = load_state(model_dir, SPEAKER_ENCODER)
    except ConfigError:
        return default
    encoder = ECAPA_TimeDelayNet(dit_config).float()
    missing, unexpected = encoder.load_state_dict({key: value.float() for key, value in state.items()}, strict=False)
    if unexpected or [key for key in missing if not key.endswith("num_batches_tracked")]:
        raise ConfigError("model", f"the speaker encoder's weights do not fit: {missing[:3]}, {unexpected[:3]}")
    encoder.eval()
    with torch.no_grad():
        clip = encoder(torch.from_numpy(ref_mel))
        scores = {
            name: float(torch.nn.functional.cosine_similarity(clip, encoder(value["ref_mel"].float())).item())
            for name, value in speakers.items()
        }
    return max(sorted(scores), key=lambda name: scores[name])


def reference_frames(model_dir: str) -> int:
    """Frames of a reference mel: the built-in voices' length (the longest of them)."""
    from stages.models.qwen2_5_omni import speakers

    return max(int(value["ref_mel"].shape[1]) for value in speakers(model_dir).values())


def min_seconds(model_dir: str) -> float:
    """The shortest clip that fills a reference mel."""
    from stages.models.qwen2_5_omni import config

    hop = int(np.prod(config(model_dir).token2wav_config.bigvgan_config.upsample_rates))
    return reference_frames(model_dir) * hop / SAMPLE_RATE


def centre(mel: np.ndarray, frames: int) -> np.ndarray:
    """The middle `frames` frames of a [1, T, mel_dim] mel; ValueError when it has fewer."""
    if mel.shape[1] < frames:
        raise ValueError(f"the clip gives {mel.shape[1]} mel frames; a reference needs {frames}")
    start = (mel.shape[1] - frames) // 2
    return np.ascontiguousarray(mel[:, start : start + frames])


def derive(model_dir: str, samples: np.ndarray, sample_rate: int) -> VoiceConditioning:
    """The conditioning a custom voice made from this clip speaks with on this checkpoint."""
    from stages.models.qwen2_5_omni import config, family, speakers

    token2wav = config(model_dir).token2wav_config
    hop = int(np.prod(token2wav.bigvgan_config.upsample_rates))
    whole = reference_mel(samples, sample_rate, mel_dim=token2wav.dit_config.mel_dim, hop=hop)
    mel = centre(whole, reference_frames(model_dir))
    voices = speakers(model_dir)
    default = next((name for name in voices if name.lower() == family.default_voice.lower()), sorted(voices)[0])
    nearest = nearest_voice(model_dir, token2wav.dit_config, mel, voices, default)
    speaker = voices[nearest]
    cond: Tensor = to_wire(speaker["cond"].float().reshape(1, -1))
    return VoiceConditioning(bos_token=int(speaker["bos_token"]), cond=cond, ref_mel=to_wire(mel), nearest=nearest)
