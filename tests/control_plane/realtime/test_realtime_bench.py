"""`omnistage bench serve --endpoint realtime` against the echo-voice deployment: spoken turns
(espeak-ng's WAV, streamed at 1x real time) under server VAD, each measured from the server's
speech_stopped; every turn answers, first audio comes before the end, and the audio it counted
is the answer the history keeps."""

from __future__ import annotations

import wave

import numpy as np
import pytest
from bench_cli import METRICS, bench_serve, recorded_audio_seconds

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_bench_serve_speaks_realtime_turns(voice_stack, spoken_hello, tmp_path):
    speech = tmp_path / "hello.wav"
    with wave.open(str(speech), "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(24000)
        writer.writeframes((np.clip(spoken_hello, -1, 1) * 32767).astype("<i2").tobytes())
    run = bench_serve(voice_stack.base, voice_stack.user_secret, tmp_path, "--model", "echo-voice",
                      "--endpoint", "realtime", "--speech-wav", str(speech), "--concurrency", "2",
                      "--num-prompts", "2", "--warmups", "0")  # fmt: skip
    assert run.code == 0, run.stderr
    voice_stack.history_written()
    (level,) = run.levels()
    assert (level["successful"], level["failed"]) == (2, 0)
    assert all(level[metric] for metric in METRICS), {metric: level[metric] for metric in METRICS}
    assert set(level["stages"]["stages"]) == {"echo", "voice"}
    for request in run.requests():
        assert 0 < request["audio_ttfp_ms"] < request["e2el_ms"]
        assert request["audio_seconds"] == pytest.approx(recorded_audio_seconds(request["request_id"], "out"), abs=1e-3)
