"""The input audio buffer: what the client appended since the last commit or clear.

Samples stay at the client's rate until a commit turns them into a user item (at the
model's rate). Positions are ms of audio since the session's first appended sample, the
clock of `audio_start_ms` / `audio_end_ms`. While nobody speaks under server VAD, only
the last `keep_ms` are kept (the prefix padding a coming turn starts with).
"""

from __future__ import annotations

import numpy as np

MIN_COMMIT_MS = 100


class InputBuffer:
    def __init__(self, rate: int):
        self.rate = rate
        self.samples = np.zeros(0, dtype=np.float32)
        self.start_sample = 0  # session position of samples[0]

    @property
    def end_sample(self) -> int:
        return self.start_sample + self.samples.size

    @property
    def end_ms(self) -> int:
        return self.end_sample * 1000 // self.rate

    @property
    def duration_ms(self) -> int:
        return self.samples.size * 1000 // self.rate

    def append(self, samples: np.ndarray) -> None:
        self.samples = np.concatenate([self.samples, samples])

    def keep_last(self, keep_ms: int) -> None:
        keep = keep_ms * self.rate // 1000
        if self.samples.size > keep:
            drop = self.samples.size - keep
            self.samples = self.samples[drop:]
            self.start_sample += drop

    def take(self, start_ms: int | None = None, end_ms: int | None = None) -> np.ndarray:
        """The samples in [start_ms, end_ms) (clamped to the buffer) and an empty buffer after them."""
        first = 0 if start_ms is None else max(0, start_ms * self.rate // 1000 - self.start_sample)
        last = self.samples.size if end_ms is None else max(first, end_ms * self.rate // 1000 - self.start_sample)
        taken = self.samples[first:last]
        self.clear()
        return taken

    def clear(self) -> None:
        self.start_sample = self.end_sample
        self.samples = np.zeros(0, dtype=np.float32)

    def rebase(self, rate: int) -> None:
        """The input format changed: start over at the new rate, keeping the clock."""
        ms = self.end_ms
        self.rate = rate
        self.samples = np.zeros(0, dtype=np.float32)
        self.start_sample = ms * rate // 1000
