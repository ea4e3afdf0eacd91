"""Which CUDA stream a replica thread steps on: its own, and for autoregressive stages a high-priority one.

Stages that share a GPU in one process (the in-process driver, a stage group's host) each step on
their own stream, so one stage's host syncs do not wait for another's queued work. Their kernels
then compete for the GPU's SMs: a code2wav window batch launches thousands of large DiT blocks,
a talker's decode step a few hundred small ones that every later frame of every request waits for.
On a high-priority stream the GPU's block scheduler dispatches the decode step's blocks ahead of
pending ones of the normal stream as SMs free up. Whether that shortens a decode step depends on how
much of the GPU the other stages keep busy (BENCHMARKS.md has what it measured).

`OMNISTAGE_REPLICA_STREAMS=0`: every stage on the default stream; `OMNISTAGE_STREAM_PRIORITIES=0`:
own streams, all of normal priority.
"""

from __future__ import annotations

import os

from stages.config import StageKind

HIGH_PRIORITY = -1
"""torch's stream priorities: lower numbers run first; out-of-range values map to the device's highest."""


def own_stream_device(device: str) -> str | None:
    """The device of a stage whose replica thread gets its own CUDA stream; None: the default stream."""
    if not device.startswith("cuda") or os.environ.get("OMNISTAGE_REPLICA_STREAMS", "1") == "0":
        return None
    return device


def stream_priority(kind: StageKind) -> int:
    """Autoregressive stages (whose every step gates the requests' next tokens and frames) step on
    high-priority streams; generation and diffusion stages on normal ones."""
    if os.environ.get("OMNISTAGE_STREAM_PRIORITIES", "1") == "0":
        return 0
    return HIGH_PRIORITY if kind == "ar" else 0
