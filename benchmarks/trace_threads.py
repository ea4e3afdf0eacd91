"""What each host thread did with the CUDA runtime in a torch profiler's chrome trace.

The profiler records CUDA runtime calls on every thread (CUPTI) but, off the thread that started it,
no torch operators; a stage's replica thread is known by the stream its kernels ran on. Per thread:
the streams of its kernels, its kernel launches and graph replays, the time it spent in stream and
event syncs, and its gaps (no runtime call for longer than `GAP_MS`: Python between launches, or a
wait for the interpreter) with the kernels launched right after the longest of them.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from pathlib import Path

GAP_MS = 3.0
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")
SYNCS = ("cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize")


def load_events(trace: Path) -> list[dict]:
    opener = gzip.open if trace.suffix == ".gz" else open
    with opener(trace, "rt") as source:
        data = json.load(source)
    return data["traceEvents"] if isinstance(data, dict) else data


def thread_report(trace: Path) -> list[str]:
    """One block of lines per thread that called the CUDA runtime, busiest first."""
    events = load_events(trace)
    calls = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver") and "ts" in e]
    kernels = {e["args"].get("correlation"): e for e in events if e.get("cat") == "kernel" and "args" in e}
    by_thread: dict[int, list[dict]] = defaultdict(list)
    for call in calls:
        by_thread[call["tid"]].append(call)
    lines = []
    for tid, mine in sorted(by_thread.items(), key=lambda item: -len(item[1])):
        mine.sort(key=lambda call: call["ts"])
        streams = Counter(
            kernels[c["args"]["correlation"]]["tid"] for c in mine if c.get("args", {}).get("correlation") in kernels
        )
        names = Counter(call["name"] for call in mine)
        sync_ms = sum(call.get("dur", 0) for call in mine if call["name"] in SYNCS) / 1e3
        gaps = _gaps(mine, kernels)
        lines.append(
            f"  thread {tid}: kernels per stream {dict(streams.most_common(3))}, {sum(names[n] for n in LAUNCHES)} kernel launches,"
            f" {names['cudaGraphLaunch']} graph replays, {sum(names[n] for n in SYNCS)} syncs ({sync_ms:.0f} ms),"
            f" {len(gaps)} gaps over {GAP_MS:g} ms ({sum(gap for gap, _ in gaps):.0f} ms)"
        )
        after = Counter(kernel for _, kernel in gaps if kernel)
        if after:
            lines.append("    launched after those gaps: " + ", ".join(f"{k} x{n}" for k, n in after.most_common(3)))
    return lines


def _gaps(calls: list[dict], kernels: dict) -> list[tuple[float, str]]:
    """(milliseconds, the kernel launched next or "") for each pause between consecutive calls over GAP_MS."""
    gaps = []
    for before, call in zip(calls, calls[1:], strict=False):
        gap = (call["ts"] - before["ts"] - before.get("dur", 0)) / 1e3
        if gap > GAP_MS:
            kernel = kernels.get(call.get("args", {}).get("correlation"))
            gaps.append((gap, kernel["name"][:40] if kernel else ""))
    return gaps
