"""The edge audio: G.711 against the standard library's reference codecs, resampling,
formats in both spellings, and the energy VAD's turn boundaries."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from control_plane.realtime import g711
from control_plane.realtime.audio_formats import PCM, PCMA, PCMU, FormatError, parse_format
from control_plane.realtime.vad import EnergyVad
from stages.resampling import StreamResampler, resample

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    audioop = pytest.importorskip("audioop")  # the reference G.711 implementation (CPython <= 3.12)

ALL_PCM = np.arange(-32768, 32768, dtype=np.int16)


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
def test_g711_matches_the_reference_codec_on_every_sample(law):
    reference_encode = audioop.lin2ulaw if law == "ulaw" else audioop.lin2alaw
    reference_decode = audioop.ulaw2lin if law == "ulaw" else audioop.alaw2lin
    assert g711.encode(ALL_PCM, law) == reference_encode(ALL_PCM.tobytes(), 2)
    every_byte = bytes(range(256))
    assert g711.decode(every_byte, law).tobytes() == reference_decode(every_byte, 2)


def test_formats_in_ga_and_beta_spelling():
    assert parse_format({"type": "audio/pcm", "rate": 24000}, "f") is PCM
    assert parse_format("pcm16", "f") is PCM
    assert parse_format({"type": "audio/pcmu"}, "f") is PCMU
    assert parse_format("g711_alaw", "f") is PCMA
    with pytest.raises(FormatError, match="24000"):
        parse_format({"type": "audio/pcm", "rate": 16000}, "f")
    with pytest.raises(FormatError):
        parse_format("mp3", "f")
    with pytest.raises(FormatError, match="even"):
        PCM.decode(b"\x00\x01\x02")


@pytest.mark.parametrize("fmt", [PCM, PCMU, PCMA])
def test_encode_decode_round_trip(fmt):
    tone = 0.5 * np.sin(2 * np.pi * 440 * np.arange(fmt.rate // 10) / fmt.rate).astype(np.float32)
    back = fmt.decode(fmt.encode(tone))
    assert back.shape == tone.shape
    assert np.max(np.abs(back - tone)) < (2e-4 if fmt is PCM else 0.02)


@pytest.mark.parametrize(("source", "target"), [(16000, 24000), (24000, 16000), (24000, 8000), (8000, 24000)])
def test_streaming_resampler_has_no_seams_and_keeps_a_tone(source, target):
    frequency = 300.0
    seconds = 0.5
    signal = np.sin(2 * np.pi * frequency * np.arange(int(source * seconds)) / source).astype(np.float32)
    whole = resample(signal, source, target)
    streamer = StreamResampler(source, target)
    pieces = np.concatenate([streamer.process(chunk) for chunk in np.array_split(signal, 37)])
    np.testing.assert_allclose(pieces, whole, atol=1e-5)
    assert abs(whole.size - target * seconds) <= 2
    delay = 31 / source if target < source else 0.0  # the low-pass filter's group delay
    expected = np.sin(2 * np.pi * frequency * (np.arange(whole.size) / target - delay))
    settled = slice(target // 20, whole.size - target // 50)
    assert np.max(np.abs(whole[settled] - expected[settled])) < 0.02


def test_downsampling_removes_what_the_new_rate_cannot_carry():
    rate = 24000
    high = np.sin(2 * np.pi * 6000 * np.arange(rate) / rate).astype(np.float32)  # above 8 kHz's Nyquist
    assert np.sqrt(np.mean(resample(high, rate, 8000)[400:] ** 2)) < 0.05


def test_vad_finds_a_turn_with_its_boundaries():
    rate = 24000
    silence = np.zeros(rate // 2, dtype=np.float32)
    speech = (0.3 * np.sin(2 * np.pi * 200 * np.arange(rate) / rate)).astype(np.float32)
    vad = EnergyVad(rate, threshold=0.5, silence_duration_ms=500)
    events = []
    for chunk in np.array_split(np.concatenate([silence, speech, silence, silence]), 50):
        events += vad.feed(chunk)
    assert [(event.kind, event.ms) for event in events] == [("start", 500), ("stop", 1500)]


def test_vad_threshold_ignores_quiet_noise():
    rate = 16000
    noise = (0.001 * np.random.default_rng(0).standard_normal(rate * 2)).astype(np.float32)  # about -60 dBFS
    assert EnergyVad(rate, threshold=0.5).feed(noise) == []
    assert EnergyVad(rate, threshold=0.1).feed(noise)[0].kind == "start"
