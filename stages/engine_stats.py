"""What an engine says about its last `step()`, for the replica host's metrics.

An engine may set `last_step` (a `StepStats`) in each `step()`, name its `unit` (what
`StepStats.units` counts: "tokens", "frames", "steps") and offer `capacity()` (a
`stages.replica_stats.Capacity`). All optional: `step_stats` falls back on counting the
outputs. Wrappers that hold the stepping engine as `.engine` (a family's input preparation, a
talker over its AR engine) are looked through.
"""

from __future__ import annotations

from dataclasses import dataclass

from stages.protocol import StageOutput
from stages.replica_stats import Capacity


@dataclass(frozen=True)
class StepStats:
    batch: int = 0
    """Requests the step computed."""
    units: int = 0
    """Tokens, frames or denoising steps the step produced."""


def inner_engine(engine):
    """The engine that does the stepping: `engine`, or the one a wrapper holds as `.engine`."""
    for _ in range(8):
        inner = getattr(engine, "engine", None)
        if inner is None or inner is engine:
            return engine
        engine = inner
    return engine


def unit_of(engine) -> str:
    return getattr(inner_engine(engine), "unit", "outputs")


def clear_step_stats(engine) -> None:
    """Before a step: a wrapper may return without stepping its engine (nothing to step yet), and
    that engine's account of its previous step must not be counted again."""
    inner = inner_engine(engine)
    if isinstance(getattr(inner, "last_step", None), StepStats):
        inner.last_step = StepStats()


def step_stats(engine, outputs: list[StageOutput]) -> StepStats:
    """The engine's own account of its last step, else one from its outputs (each request with an
    output counts in the batch; the units are its tokens, or one per output)."""
    stats = getattr(inner_engine(engine), "last_step", None)
    if isinstance(stats, StepStats):
        return stats
    produced = [output for output in outputs if output.error is None]
    units = sum(len(output.token_ids) if output.token_ids else 1 for output in produced)
    return StepStats(batch=len({output.request_id for output in produced}), units=units)


def capacity_of(engine) -> Capacity | None:
    report = getattr(inner_engine(engine), "capacity", None)
    if report is None:
        return None
    try:
        return report()
    except Exception:  # noqa: BLE001 - a metric must never stop the host
        return None
