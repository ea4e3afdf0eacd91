"""Which CUDA stream a replica thread steps on: its own, and for autoregressive stages a high-priority one.

Stages that share a GPU in one process (the in-process driver, a stage group's host) each step on
their own stream, so one stage's host syncs do not wait for another's queued work. Their kernels
then compete for the GPU's SMs: a code2wav window batch launches thousands of large DiT blocks,
a talker's decode step a few hundred small ones that every later frame of every request waits for.
On a high-priority stream the GPU's block scheduler dispatches the decode step's blocks ahead of
pending ones of the normal stream as SMs free up. Whether that shortens a decode step depends on how
much of the GPU the other stages keep busy (BENCHMARKS.md has what it measured).

A stage deployed with `gpu_sms` steps on a stream confined to that many SMs (a CUDA green context,
`stages/sm_partition.py`): its kernels never occupy the rest, which the other stages' kernels then
always find free.

`OMNISTAGE_REPLICA_STREAMS=0`: every stage on the default stream; `OMNISTAGE_STREAM_PRIORITIES=0`:
own streams, all of normal priority.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from stages.config import StageDeployConfig, StageKind
from stages.sm_partition import partitioned_stream


@dataclass(frozen=True)
class StageStream:
    """The CUDA stream one replica thread of a stage steps on."""

    device: str
    priority: int = 0
    sms: int | None = None
    """Confined to this many SMs (None: all of the device's)."""


def stage_stream(kind: StageKind, stage_deploy: StageDeployConfig) -> StageStream | None:
    """The stream of a stage's replica thread; None: the default stream (not on a GPU, or turned off)."""
    device = own_stream_device(stage_deploy.device)
    if device is None:
        return None
    return StageStream(device, stream_priority(kind), stage_deploy.gpu_sms)


@contextlib.contextmanager
def stepping_on(spec: StageStream | None) -> Iterator[Any]:
    """Within the block this thread's current device and stream are `spec`'s (a confined stream where it
    names `sms` and the driver can make one, else an ordinary one); yields the stream (None: no spec)."""
    if spec is None:
        yield None
        return
    import torch

    device = torch.device(spec.device)
    with torch.cuda.device(device):
        stream = partitioned_stream(spec.device, spec.sms, spec.priority) if spec.sms is not None else None
        stream = stream or torch.cuda.Stream(device, priority=spec.priority)
        with torch.cuda.stream(stream):
            yield stream


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
