"""bench serve's arithmetic: audio seconds from streamed WAV/PCM chunks however they are cut,
one request's TTFT/TPOT/ITL/TTFP/RTF, and a level's distributions and throughputs."""

from __future__ import annotations

import numpy as np
import pytest

from client.bench.metrics import Level, distribution
from client.bench.options import OptionsError, ServeOptions
from client.bench.pcm import PcmCounter
from client.bench.record import RequestRecord
from control_plane.inference.audio_encoding import wav_header


@pytest.mark.parametrize("cut", [1, 3, 7, 44, 45, 1000])
def test_streamed_wav_seconds_whatever_the_chunking(cut):
    stream = wav_header(16000) + b"\x01\x02" * 4000  # 0.25 s at 16 kHz
    counter = PcmCounter()
    seconds = sum(counter.add(stream[i : i + cut]) for i in range(0, len(stream), cut))
    assert seconds == pytest.approx(0.25) and counter.sample_rate == 16000


def test_raw_pcm_needs_its_rate():
    assert PcmCounter(24000).add(b"\x00" * 4800) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="sample rate"):
        PcmCounter().add(b"\x00\x00")


def test_one_requests_figures():
    record = RequestRecord(start=10.0, text_tokens=5)
    for now in (10.2, 10.3, 10.5):  # three deltas carrying five tokens
        record.on_text(now)
    record.on_audio(10.4, 0.5)
    record.on_audio(10.9, 1.5)
    record.end = 11.0
    assert record.ttft == pytest.approx(0.2)
    assert record.tpot == pytest.approx(0.3 / 4)  # over the server's token count, not the deltas
    assert record.itl == pytest.approx([0.1, 0.2])
    assert record.ttfp == pytest.approx(0.4) and record.e2el == pytest.approx(1.0)
    assert record.rtf == pytest.approx(0.9 / 2.0)  # to the last audio packet, per second of audio
    assert record.ok and not RequestRecord(start=1.0, end=2.0).fail("HTTP 500: boom").ok


def test_a_levels_summary():
    records = []
    for index in range(4):
        record = RequestRecord(start=0.0, end=1.0 + index, text_tokens=10)
        record.on_text(0.5)
        records.append(record)
    records.append(RequestRecord(start=0.0).fail("HTTP 503: Service unavailable"))
    summary = Level(4, None, records, duration_s=4.0).summary()
    assert (summary["successful"], summary["failed"]) == (4, 1)
    assert summary["first_error"] == "HTTP 503: Service unavailable"
    assert summary["request_throughput"] == 1.0 and summary["output_tokens_per_s"] == 10.0
    assert summary["e2el_ms"] == distribution([1.0, 2.0, 3.0, 4.0], 1000)
    assert summary["e2el_ms"]["p95"] == pytest.approx(np.percentile([1000, 2000, 3000, 4000], 95))
    assert summary["audio_ttfp_ms"] is None and summary["audio_rtf"] is None
    assert len(summary["per_request"]) == 5 and summary["per_request"][4]["ok"] is False


def test_options_are_checked_before_any_request():
    with pytest.raises(OptionsError, match="one per --concurrency level"):
        ServeOptions.from_mapping({"model": "m", "api_key": "k", "concurrency": [1, 2], "num_prompts": [1, 2, 3]})
    with pytest.raises(OptionsError, match="--extra-body is not JSON"):
        ServeOptions.from_mapping({"model": "m", "api_key": "k", "extra_body": "{nope"})
    options = ServeOptions.from_mapping({"model": "m", "api_key": "k", "concurrency": [1, 8], "num_prompts": [3]})
    assert options.prompts_per_level() == [3, 3]
    default = ServeOptions.from_mapping({"model": "m", "api_key": "k", "concurrency": [2, 4]})
    assert default.prompts_per_level() == [8, 16]
