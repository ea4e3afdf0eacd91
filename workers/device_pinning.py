"""One GPU per replica host: a stage placed on `cuda:N` runs in a process that sees only that
device (CUDA_VISIBLE_DEVICES), where it is `cuda:0`. Engines that pick their GPU themselves (vLLM)
land on it, and no stray allocation reaches another device of the host."""

from __future__ import annotations

from collections.abc import Mapping

PINNED = "OMNISTAGE_PINNED_DEVICE"
"""Set in a pinned host's environment to the device it was pinned to, as the deployment names it."""


def pinned_environment(device: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables a host for a replica on `device` starts with: none unless it is `cuda:N`
    and N is visible to this worker (else the engine reports the missing device itself)."""
    prefix, _, index = device.partition(":")
    if prefix != "cuda" or not index.isdigit():
        return {}
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        physical = index
    else:
        ids = [entry.strip() for entry in visible.split(",") if entry.strip()]
        if int(index) >= len(ids):
            return {}
        physical = ids[int(index)]
    return {"CUDA_VISIBLE_DEVICES": physical, PINNED: device}


def local_device(device: str, environ: Mapping[str, str]) -> str:
    """What `device` is called inside this process: `cuda:0` in a host pinned to it."""
    return "cuda:0" if device.startswith("cuda:") and environ.get(PINNED) == device else device
