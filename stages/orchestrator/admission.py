"""Admission at the entry: a request is taken only if every stage it needs has room for it.

A stage's load is the number of the deployment's requests in flight that still need it:
placed on one of its replicas, waiting for one, or still upstream of it (they will arrive).
Its capacity is its replicas × (`max_running` + `max_waiting`), both per replica in the
deploy config (defaults: the stage's `max_batch` each). Counting upstream requests keeps the
slowest stage from piling up work its upstream stages already accepted.

A refused request gets `code="overloaded"` and an estimate of when a slot frees up, from the
stage's recent durations: the requests beyond its running slots, cleared `max_running` at a
time per replica.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from stages.config import DeployConfig, StageConfig
from stages.orchestrator.state import RequestState
from stages.protocol import StageError

MIN_RETRY_AFTER_S = 1
MAX_RETRY_AFTER_S = 60
DEFAULT_STAGE_SECONDS = 1.0
"""A stage's assumed duration per request before one finished there."""


class StageSeconds:
    """How long each stage of a deployment recently took per request (a moving average)."""

    def __init__(self, weight: float = 0.2):
        self.weight = weight
        self.mean: dict[str, float] = {}

    def observe(self, stage: str, seconds: float) -> None:
        if seconds < 0:
            return
        previous = self.mean.get(stage)
        self.mean[stage] = seconds if previous is None else previous + self.weight * (seconds - previous)

    def of(self, stage: str) -> float:
        return self.mean.get(stage, DEFAULT_STAGE_SECONDS)


def stage_load(states: Iterable[RequestState], stage_id: int) -> int:
    """Requests in flight that have not finished stage `stage_id` (it was never wanted: finished)."""
    return sum(1 for state in states if stage_id in state.stages and not state.stages[stage_id].finished)


def admission_refusal(
    deploy: DeployConfig,
    stages: Iterable[StageConfig],
    states: list[RequestState],
    seconds: StageSeconds,
) -> StageError | None:
    """Why a new request needing `stages` cannot be admitted now, or None when it can.
    `states` are the deployment's requests in flight."""
    for stage in stages:
        config = deploy.for_stage(stage)
        running = config.replicas * config.running_limit
        capacity = running + config.replicas * config.waiting_limit
        load = stage_load(states, stage.id)
        if load < capacity:
            continue
        retry_after = retry_after_s(seconds.of(stage.name), load, running)
        message = (
            f"stage {stage.name!r} is at capacity: {load} requests in flight for {config.replicas} replica(s) "
            f"of max_running={config.running_limit} + max_waiting={config.waiting_limit}; "
            f"retry in about {retry_after} s"
        )
        return StageError(message=message, code="overloaded", retry_after_s=float(retry_after))
    return None


def retry_after_s(stage_seconds: float, load: int, running: int) -> int:
    """Seconds until a slot should free up: the requests beyond the running slots, plus this
    one, cleared `running` at a time, each batch taking the stage's mean duration."""
    ahead = max(1, load - running + 1)
    estimate = stage_seconds * ahead / max(1, running)
    return min(MAX_RETRY_AFTER_S, max(MIN_RETRY_AFTER_S, math.ceil(estimate)))
