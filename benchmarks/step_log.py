"""Every autoregressive engine step of a run, timed on the host, by how it ran.

`record()` wraps `ARTorchEngine.step` and `ModelRunner.run` for the rest of the process
(benchmarks only): each step of each engine becomes a `Step` with its thread (a replica thread is
named for its stage), its wall time (sampling and the host sync it waits for included), how many
decodes and prompt tokens it computed, and how its forward ran: the decode graph replayed, split
(decodes replayed, prompt chunks eager), all eager, prompts through a prompt graph, or split-prompt
(decodes replayed, then the prompts' graph). `report()` prints, per stage, the
steps of each kind with their mean and p50 time and, for the first seconds of a round, each step in
order: what a request's first frame waits for when many arrive at once.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    thread: str
    began: float
    seconds: float
    decodes: int
    prompt_tokens: int
    path: str
    """`ModelRunner.last_path` (steps that scheduled nothing are not recorded)."""


STEPS: list[Step] = []
_step = threading.local()


def record() -> None:
    """Time every AR engine step from now on (idempotent)."""
    from stages.ar.model_runner import ModelRunner
    from stages.ar.torch_engine import ARTorchEngine

    if getattr(ARTorchEngine.step, "_step_log", False):
        return
    engine_step, runner_run = ARTorchEngine.step, ModelRunner.run

    def step(engine):
        _step.ran = None
        began = time.perf_counter()
        outputs = engine_step(engine)
        if _step.ran is not None:
            decodes, tokens, path = _step.ran
            seconds = time.perf_counter() - began
            STEPS.append(Step(threading.current_thread().name, began, seconds, decodes, tokens - decodes, path))
        return outputs

    def run(runner, batch):
        result = runner_run(runner, batch)
        _step.ran = (batch.num_decodes, batch.num_tokens, runner.last_path)
        return result

    step._step_log = True
    ARTorchEngine.step, ModelRunner.run = step, run


def report(since: float, first_seconds: float = 2.0) -> None:
    """The steps taken since `since` (a `time.perf_counter()` value), per thread, then cleared."""
    steps = [step for step in STEPS if step.began >= since]
    STEPS.clear()
    for thread in sorted({step.thread for step in steps}):
        mine = [step for step in steps if step.thread == thread]
        kinds = []
        for kind in ("graph", "split", "eager", "prompt", "split-prompt"):
            times = [step.seconds * 1e3 for step in mine if step.path == kind]
            if times:
                kinds.append(
                    f"{kind} {len(times)} (mean {statistics.fmean(times):.1f} / p50 {statistics.median(times):.1f} ms)"
                )
        admitting = [step for step in mine if step.prompt_tokens]
        print(
            f"  steps {thread}: " + ", ".join(kinds) + f"; {len(admitting)} of them computed prompt tokens", flush=True
        )
        early = [step for step in mine if step.began - since < first_seconds]
        print(
            f"    first {first_seconds:g} s (start s: path decodes+prompt tokens ms): "
            + " ".join(
                f"{step.began - since:.2f}:{step.path[0]}{step.decodes}+{step.prompt_tokens}:{step.seconds * 1e3:.0f}"
                for step in early
            ),
            flush=True,
        )
