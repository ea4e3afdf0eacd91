"""Energy-based voice activity detection for `server_vad` turns.

Audio is cut into 20 ms frames; a frame is speech when its RMS level passes the threshold.
The protocol's `threshold` (0..1, default 0.5) maps linearly onto -70..-10 dBFS, so the
default is -40 dBFS. Speech starts after `START_FRAMES` speech frames in a row (a click is
not a turn) and stops after `silence_duration_ms` without a speech frame. Times are ms of
audio since the session's first appended sample, as `audio_start_ms` / `audio_end_ms` are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

FRAME_MS = 20
START_FRAMES = 2


def threshold_rms(threshold: float) -> float:
    return float(10 ** ((-70.0 + 60.0 * threshold) / 20.0))


@dataclass
class VadEvent:
    kind: str  # "start" or "stop"
    ms: int


@dataclass
class EnergyVad:
    rate: int
    threshold: float = 0.5
    silence_duration_ms: int = 500
    speaking: bool = False
    position_ms: int = 0
    voiced_run: int = 0
    silence_ms: int = 0
    last_voice_end_ms: int = 0
    _pending: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))

    @property
    def frame_samples(self) -> int:
        return self.rate * FRAME_MS // 1000

    def feed(self, samples: np.ndarray) -> list[VadEvent]:
        """Events the new samples cause, in order."""
        data = np.concatenate([self._pending, np.asarray(samples, dtype=np.float32)])
        frames = data.size // self.frame_samples
        self._pending = data[frames * self.frame_samples :]
        events = []
        level = threshold_rms(self.threshold)
        for index in range(frames):
            frame = data[index * self.frame_samples : (index + 1) * self.frame_samples]
            voiced = float(np.sqrt(np.mean(frame * frame))) >= level
            self.position_ms += FRAME_MS
            event = self._frame(voiced)
            if event is not None:
                events.append(event)
        return events

    def _frame(self, voiced: bool) -> VadEvent | None:
        if voiced:
            self.voiced_run += 1
            self.silence_ms = 0
            self.last_voice_end_ms = self.position_ms
            if not self.speaking and self.voiced_run >= START_FRAMES:
                self.speaking = True
                return VadEvent("start", self.position_ms - START_FRAMES * FRAME_MS)
            return None
        self.voiced_run = 0
        if self.speaking:
            self.silence_ms += FRAME_MS
            if self.silence_ms >= self.silence_duration_ms:
                self.speaking = False
                self.silence_ms = 0
                return VadEvent("stop", self.last_voice_end_ms)
        return None

    def reset(self) -> None:
        """Forget a turn in progress (the buffer was cleared or committed by hand)."""
        self.speaking = False
        self.voiced_run = 0
        self.silence_ms = 0
