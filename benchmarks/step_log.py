"""Every autoregressive engine step of a run, timed on the host, by how it ran.

`record()` wraps `ARTorchEngine.step` and `ModelRunner`'s two forward paths for the rest of the
process (benchmarks only): each step of each engine becomes a `Step` with its thread (a replica
thread is named for its stage), its wall time (sampling and the host sync it waits for included),
how many decodes and prompt tokens it computed, and whether its forward replayed the decode graph
or ran eagerly (a step that admits a prompt always runs eagerly). `report()` prints, per stage, the
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
    """"graph" or "eager" (steps that scheduled nothing are not recorded)."""


STEPS: list[Step] = []
_path = threading.local()


def record() -> None:
    """Time every AR engine step from now on (idempotent)."""
    from stages.ar.model_runner import ModelRunner
    from stages.ar.torch_engine import ARTorchEngine

    if getattr(ARTorchEngine.step, "_step_log", False):
        return
    engine_step, run_graph, run_eager = ARTorchEngine.step, ModelRunner._run_graph, ModelRunner._run_eager

    def step(engine):
        _path.value, _path.work = "none", (0, 0)
        began = time.perf_counter()
        outputs = engine_step(engine)
        if _path.value != "none":
            decodes, tokens = _path.work
            STEPS.append(
                Step(
                    threading.current_thread().name,
                    began,
                    time.perf_counter() - began,
                    decodes,
                    tokens - decodes,
                    _path.value,
                )
            )
        return outputs

    def graph(runner, packed, *args, **kwargs):
        _path.value, _path.work = "graph", (len(packed.owners), len(packed.token_ids))
        return run_graph(runner, packed, *args, **kwargs)

    def eager(runner, packed, num_decodes, *args, **kwargs):
        _path.value, _path.work = "eager", (num_decodes, len(packed.token_ids))
        return run_eager(runner, packed, num_decodes, *args, **kwargs)

    step._step_log = True
    ARTorchEngine.step, ModelRunner._run_graph, ModelRunner._run_eager = step, graph, eager


def report(since: float, first_seconds: float = 2.0) -> None:
    """The steps taken since `since` (a `time.perf_counter()` value), per thread, then cleared."""
    steps = [step for step in STEPS if step.began >= since]
    STEPS.clear()
    for thread in sorted({step.thread for step in steps}):
        mine = [step for step in steps if step.thread == thread]
        kinds = []
        for kind in ("graph", "eager"):
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
