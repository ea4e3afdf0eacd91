"""A microphone the test speaks into on cue: an init script replaces getUserMedia with a Web Audio
stream that stays silent until `window.walkSpeak()` plays the utterance the test handed the page
(`window.walkSetUtterance(samples)`, mono float samples at RATE). The page's own capture path
(AudioWorklet, resampling to 24 kHz PCM16, /v1/realtime) runs unchanged; only the device is fake.

Unlike Chromium's looping fake capture file, each turn is spoken exactly once, when the previous
answer is in, so that a conversation has as many turns as the test asks for."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import soundfile
from procs import unavailable

from stages.resampling import resample

RATE = 48000

FAKE_MICROPHONE = """
(() => {
  const RATE = __RATE__;
  let context = null, destination = null, utterance = null;
  window.walkSpoken = 0;
  navigator.mediaDevices.getUserMedia = async () => {
    context = new AudioContext({ sampleRate: RATE });
    await context.resume();
    destination = context.createMediaStreamDestination();
    return destination.stream;
  };
  window.walkSetUtterance = (samples) => { utterance = Float32Array.from(samples); };
  window.walkSpeak = () => new Promise((resolve, reject) => {
    if (!context || !utterance) return reject(new Error("no microphone open, or nothing to say"));
    const buffer = context.createBuffer(1, utterance.length, RATE);
    buffer.copyToChannel(utterance, 0);
    const source = context.createBufferSource();
    source.buffer = buffer;
    source.connect(destination);
    source.onended = () => { window.walkSpoken += 1; resolve(window.walkSpoken); };
    source.start();
  });
})();
""".replace("__RATE__", str(RATE))


def spoken_utterance(text: str, work_dir: Path) -> list[float]:
    """`text` as espeak-ng speaks it, mono at RATE, with a short lead-in of silence."""
    if shutil.which("espeak-ng") is None:
        unavailable("espeak-ng is not installed (apt-get install -y espeak-ng)")
    path = work_dir / "utterance.wav"
    subprocess.run(["espeak-ng", "-w", str(path), text], check=True, capture_output=True)
    samples, rate = soundfile.read(path, dtype="float32")
    speech = resample(samples if samples.ndim == 1 else samples.mean(axis=1), rate, RATE)
    lead_in = np.zeros(RATE // 5, dtype=np.float32)
    return np.concatenate([lead_in, speech]).round(5).tolist()
