"""What a replica host measures about its stage and its device, sent with its heartbeat
(`ReplicaStatus.stats`, `ReplicaStatus.device_usage`).

Totals and histograms count since the host started (a restarted host starts from zero, as a
Prometheus counter does), so a missed or overwritten heartbeat loses nothing; the rate is over
the last beat's window. Histogram counts are per bucket (not cumulative); `bounds` are the
buckets' upper bounds, the last one +inf (written as None: JSON has no infinity).
"""

from __future__ import annotations

import math

import msgspec

SECONDS_BOUNDS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                                     30.0, 60.0, math.inf)  # fmt: skip
BATCH_BOUNDS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, math.inf)


class Histogram(msgspec.Struct, kw_only=True):
    bounds: list[float | None] = []
    counts: list[int] = []
    sum: float = 0.0

    @classmethod
    def empty(cls, bounds: tuple[float, ...]) -> Histogram:
        return cls(bounds=[None if math.isinf(b) else b for b in bounds], counts=[0] * len(bounds))

    @property
    def count(self) -> int:
        return sum(self.counts)

    def observe(self, value: float) -> None:
        for index, bound in enumerate(self.bounds):
            if bound is None or value <= bound:
                self.counts[index] += 1
                break
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        """(le, count) pairs as Prometheus exposes them."""
        pairs, running = [], 0
        for bound, count in zip(self.bounds, self.counts, strict=True):
            running += count
            pairs.append(("+Inf" if bound is None else repr(float(bound)), float(running)))
        return pairs


class Capacity(msgspec.Struct, kw_only=True):
    """How much of the engine's cache or batch room is in use: `kind` is `kv_blocks` (an AR
    engine's paged cache) or `slots` (requests it runs out of its `max_batch`)."""

    kind: str
    used: int
    total: int


class StageStats(msgspec.Struct, kw_only=True):
    unit: str = "outputs"
    """What `units` counts: tokens (AR), frames (generation), steps (diffusion denoising steps)."""
    units: int = 0
    units_per_s: float = 0.0
    """Units over the last heartbeat's window."""
    step_seconds: Histogram = msgspec.field(default_factory=lambda: Histogram.empty(SECONDS_BOUNDS))
    batch_size: Histogram = msgspec.field(default_factory=lambda: Histogram.empty(BATCH_BOUNDS))
    queue_seconds: Histogram = msgspec.field(default_factory=lambda: Histogram.empty(SECONDS_BOUNDS))
    """How long a request's first input waited in the replica's input stream."""
    capacity: Capacity | None = None


class DeviceUsage(msgspec.Struct, kw_only=True):
    """The replica's device as it reports itself; None where it cannot tell.

    cpu: memory is the machine's (used = total - available), `process_bytes` the host's RSS,
    utilization the host process's CPU time over the window, as a share of the machine's cores.
    cuda: memory from the driver (`mem_get_info`), `process_bytes` what torch allocated,
    utilization from NVML when it is importable."""

    device: str
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    process_bytes: int | None = None
    utilization: float | None = None
