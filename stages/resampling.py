"""Sample-rate conversion, streaming: chunks in, chunks out, no seams. Used at the realtime API's
edge and by the benchmark client (`client.bench`), which both need it without Django or torch.

Linear interpolation with the fractional read position carried from chunk to chunk;
when the rate goes down, a windowed-sinc low-pass (its history carried too) runs first
so that nothing above the new Nyquist frequency folds back.
"""

from __future__ import annotations

import numpy as np

LOWPASS_TAPS = 63


def _lowpass(cutoff: float) -> np.ndarray:
    """FIR taps, `cutoff` as a fraction of the sample rate (0 < cutoff < 0.5)."""
    n = np.arange(LOWPASS_TAPS) - (LOWPASS_TAPS - 1) / 2
    taps = 2 * cutoff * np.sinc(2 * cutoff * n) * np.hamming(LOWPASS_TAPS)
    return (taps / taps.sum()).astype(np.float32)


class StreamResampler:
    def __init__(self, source_rate: int, target_rate: int):
        self.source_rate, self.target_rate = int(source_rate), int(target_rate)
        self.step = self.source_rate / self.target_rate
        self.taps = _lowpass(0.45 * self.target_rate / self.source_rate) if self.step > 1 else None
        self.history = np.zeros(LOWPASS_TAPS - 1, dtype=np.float32)
        self.previous = np.zeros(0, dtype=np.float32)
        self.position = 0.0

    @property
    def identity(self) -> bool:
        return self.source_rate == self.target_rate

    def process(self, samples: np.ndarray) -> np.ndarray:
        samples = np.asarray(samples, dtype=np.float32)
        if self.identity or samples.size == 0:
            return samples
        if self.taps is not None:
            padded = np.concatenate([self.history, samples])
            self.history = padded[-(LOWPASS_TAPS - 1) :]
            samples = np.convolve(padded, self.taps, mode="valid").astype(np.float32)
        buffer = np.concatenate([self.previous, samples])
        last = buffer.size - 1
        if last < self.position:
            self.previous = buffer[-1:]
            self.position -= last
            return np.zeros(0, dtype=np.float32)
        count = int(np.floor((last - self.position) / self.step)) + 1
        positions = self.position + np.arange(count) * self.step
        out = np.interp(positions, np.arange(buffer.size), buffer).astype(np.float32)
        self.position = positions[-1] + self.step - last
        self.previous = buffer[-1:]
        return out


def resample(samples: np.ndarray, source_rate: int, target_rate: int) -> np.ndarray:
    """A whole signal at another rate."""
    return StreamResampler(source_rate, target_rate).process(samples)
