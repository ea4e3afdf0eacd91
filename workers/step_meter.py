"""The replica host's stage measurements: per step its time, batch size and units produced,
per request how long its first input waited in the input stream. Aggregated in place (a few
additions per step); the heartbeat thread reads a copy (`snapshot`), so nothing is sent per step."""

from __future__ import annotations

import threading
import time

import msgspec

from stages.replica_stats import Capacity, StageStats

RATE_WINDOW_MIN_S = 0.5
"""A beat sooner than this after the last one (a state change) keeps the last rate."""


class StepMeter:
    def __init__(self, unit: str = "outputs", clock=time.monotonic):
        self.clock = clock
        self.stats = StageStats(unit=unit)
        self._lock = threading.Lock()
        self._window = (clock(), 0)

    def set_unit(self, unit: str) -> None:
        with self._lock:
            self.stats.unit = unit

    def step(self, seconds: float, batch: int, units: int) -> None:
        with self._lock:
            self.stats.step_seconds.observe(seconds)
            if batch > 0:
                self.stats.batch_size.observe(batch)
            self.stats.units += units

    def queued(self, seconds: float) -> None:
        with self._lock:
            self.stats.queue_seconds.observe(max(0.0, seconds))

    def snapshot(self, capacity: Capacity | None = None) -> StageStats:
        now = self.clock()
        with self._lock:
            started, units_then = self._window
            if now - started >= RATE_WINDOW_MIN_S:
                self.stats.units_per_s = (self.stats.units - units_then) / (now - started)
                self._window = (now, self.stats.units)
            self.stats.capacity = capacity
            body = msgspec.json.encode(self.stats)
        return msgspec.json.decode(body, type=StageStats)
