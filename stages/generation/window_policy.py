"""Which frames of which request a generation stage decodes next: growing windows, deadline order.

Window sizes. A request's first window is small (`first` frames: its first audio comes fast), its
second is `chunk` frames, and each later one `growth` times the one before, up to `max_window`.
Every window is decoded with left context and look-ahead around it, a fixed cost per window, so
fewer, larger windows cost less compute per second of audio; and once a request has audio
buffered ahead of its playback, a later window's latency is hidden behind what is still playing.
From the third window on, window ends fall on multiples of `align` (the decoder's attention
block), so that steady windows of any request at any point have spans of one length: they batch
together and reuse one CUDA graph.

Once a request's input is complete, the rest is decoded as one window if it fits in the largest
window (or in the next one with its look-ahead): a request whose talker finished while its audio was
still being decoded, as under load when the decoder is the slower stage, pays for fewer windows.

Starving. A window waits until its frames (and the look-ahead) are in. If meanwhile the audio a
request has buffered ahead of playback drops below `low_water_s`, the request decodes what it
has (at least `chunk` frames) rather than wait: a slow upstream never makes its audio stutter
for the sake of a larger window.

Deadlines. A request's deadline is when its client runs out of audio: the time of its first audio
plus the audio sent since; before its first audio, its arrival (a new request's first window
goes ahead of steady windows of requests that still have audio buffered). Due windows are decoded
earliest deadline first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class StreamProgress:
    """What the policy reads of one request: its frames in and out, its clock."""

    arrived: float
    available: int = 0
    input_done: bool = False
    emitted: int = 0
    windows: int = 0
    first_audio_at: float | None = None


@dataclass(frozen=True)
class WindowPolicy:
    first: int
    chunk: int
    max_window: int
    seconds_per_frame: float
    lookahead: int = 0
    growth: float = 2.0
    align: int = 1
    low_water_s: float = 0.5

    def __post_init__(self):
        if min(self.first, self.chunk, self.align) < 1:
            raise ValueError("window sizes and alignment must be at least 1")
        if self.max_window < self.chunk:
            raise ValueError(f"max_window ({self.max_window}) must be at least chunk ({self.chunk})")
        if self.growth < 1:
            raise ValueError(f"growth must be at least 1, got {self.growth}")

    @classmethod
    def fixed(cls, first: int, chunk: int, seconds_per_frame: float, lookahead: int = 0) -> WindowPolicy:
        """First window then equal windows of `chunk` frames: no growth."""
        return cls(first, chunk, chunk, seconds_per_frame, lookahead, growth=1.0)

    def target(self, index: int) -> int:
        """Frames of a request's window number `index` (0: its first)."""
        if index == 0:
            return self.first
        return min(self.max_window, math.ceil(self.chunk * self.growth ** (index - 1)))

    def next_window(self, stream: StreamProgress, now: float) -> tuple[int, int, bool] | None:
        """The window (start, end, final) the request may decode now, or None while it waits for frames."""
        start, available = stream.emitted, stream.available
        end = self._aligned(start + self.target(stream.windows), stream.windows)
        if stream.input_done and (start == 0 or available <= max(end + self.lookahead, start + self.max_window)):
            return start, available, True
        if available >= end + self.lookahead:
            return start, end, False
        if self.target(stream.windows) > self.chunk and self.starving(stream, now):
            early = self._aligned_down(available - self.lookahead, stream.windows)
            if early - start >= self.chunk:
                return start, early, False
        return None

    def buffered_s(self, stream: StreamProgress, now: float) -> float:
        """Seconds of audio the client holds ahead of playback (playback starting at the first audio)."""
        if stream.first_audio_at is None:
            return 0.0
        return self.deadline(stream) - now

    def starving(self, stream: StreamProgress, now: float) -> bool:
        """Whether the request has audio out and less than `low_water_s` of it left to play."""
        return stream.first_audio_at is not None and self.buffered_s(stream, now) < self.low_water_s

    def deadline(self, stream: StreamProgress) -> float:
        """When the request's client runs out of audio; its arrival before it has any."""
        if stream.first_audio_at is None:
            return stream.arrived
        return stream.first_audio_at + stream.emitted * self.seconds_per_frame

    def planned_windows(self, frames: int) -> list[tuple[int, int]]:
        """The windows of a request whose frames come faster than it decodes, up to `frames`: the
        shapes a decoder meets most (its warm-up captures them)."""
        windows, start = [], 0
        while (end := self._aligned(start + self.target(len(windows)), len(windows))) + self.lookahead <= frames:
            windows.append((start, end))
            start = end
        return windows

    def _aligned(self, end: int, index: int) -> int:
        return end if index < 2 else -(-end // self.align) * self.align

    def _aligned_down(self, end: int, index: int) -> int:
        return end if index < 2 else end // self.align * self.align


def earliest_deadline_first(policy: WindowPolicy, streams: list[StreamProgress]) -> list[StreamProgress]:
    return sorted(streams, key=lambda stream: (policy.deadline(stream), stream.arrived))


def window_policy(stage_deploy, seconds_per_frame: float, lookahead: int, align: int, default_max_window: int):
    """A stage's policy from its deploy config: `first_chunk_size`, `async_chunk_size`, and the options
    `window_max` (frames of the largest window; `default_max_window`, at least `async_chunk_size`),
    `window_growth` (2.0) and `window_low_water_s` (0.5)."""
    from stages.errors import ConfigError

    options, chunk = stage_deploy.options, stage_deploy.async_chunk_size
    values = {
        "window_max": options.get("window_max", max(chunk, default_max_window)),
        "window_growth": options.get("window_growth", 2.0),
        "window_low_water_s": options.get("window_low_water_s", 0.5),
    }
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ConfigError(f"options.{name}", f"must be a non-negative number, got {value!r}")
    if values["window_max"] < chunk or int(values["window_max"]) != values["window_max"]:
        raise ConfigError("options.window_max", f"must be a whole number of frames >= async_chunk_size ({chunk})")
    if values["window_growth"] < 1:
        raise ConfigError("options.window_growth", "must be at least 1")
    return WindowPolicy(
        stage_deploy.first_chunk_size,
        chunk,
        int(values["window_max"]),
        seconds_per_frame,
        lookahead,
        growth=float(values["window_growth"]),
        align=align,
        low_water_s=float(values["window_low_water_s"]),
    )
