"""A CUDA stream whose kernels run on a fixed share of the GPU's SMs (a CUDA green context).

    stream = partitioned_stream("cuda:0", sms=112, priority=0)   # torch.cuda.ExternalStream, or None

Stages that share a GPU compete for its SMs: a code2wav batch launches thousands of large DiT blocks
that fill every SM, and an autoregressive stage's decode step (a few hundred small kernels in a row,
each of which every request's next frame waits for) then waits, kernel after kernel, for blocks to
drain. Stream priorities only reorder pending blocks. A green context confines the kernels launched
into its streams to a partition of the SMs, so work outside it always finds the other SMs free; work
in the primary context (the other stages) still uses every SM.

The driver API is reached through ctypes (torch 2.11 has no stream API for green contexts; CUDA
driver 12.4+). Kernels launched through the runtime API into a green-context stream run on its
partition; a CUDA graph's kernels do only when it was captured on such a stream (`capture_stream`),
not when a graph captured elsewhere is replayed there (`benchmarks/sm_partition.py` measures both).
`partitioned_stream` gives None where the driver or device cannot make one (the caller falls back to
an ordinary stream) and logs why.
"""

from __future__ import annotations

import ctypes
import logging

logger = logging.getLogger(__name__)

RESOURCE_TYPE_SM = 1
GREEN_CTX_DEFAULT_STREAM = 1
STREAM_NON_BLOCKING = 1
RESOURCE_BYTES = 512
"""Room for one CUdevResource (144-152 bytes in CUDA 12.4-13.x headers); the driver writes its own size."""
SM_COUNT_OFFSET = 96
"""CUdevResource: `type` (4 bytes), 92 bytes of padding, then the union whose `sm.smCount` comes first."""

_contexts: dict[tuple[int, int], tuple[ctypes.c_void_p, int]] = {}
"""(device index, SMs asked) -> (green context, SMs it got): one per partition size, shared by every
stream of that size."""
_confined: set[int] = set()
"""Handles of the streams made here."""


class GreenContextError(RuntimeError):
    pass


def partitioned_stream(device: str, sms: int, priority: int = 0):
    """A `torch.cuda.ExternalStream` on `device` whose kernels run on `sms` SMs (rounded up to the
    device's granularity, 8 on Hopper), at `priority`; None where green contexts are unavailable."""
    import torch

    index = _index(device)
    try:
        handle, granted = _green_stream(index, sms, priority)
    except (GreenContextError, OSError, AttributeError) as error:
        logger.warning("cannot confine a stream to %d SMs of cuda:%d (%s); it runs on all of them", sms, index, error)
        return None
    logger.info("a stream of cuda:%d confined to %d SMs (asked %d)", index, granted, sms)
    _confined.add(handle)
    return torch.cuda.ExternalStream(handle, device=torch.device("cuda", index))


def capture_stream():
    """The stream to capture a CUDA graph on: the current one where it is confined (a graph captured on
    another stream runs on every SM even when replayed on a confined one), else None (torch's own)."""
    import torch

    stream = torch.cuda.current_stream()
    return stream if stream.cuda_stream in _confined else None


def partition_size(device: str, sms: int) -> int:
    """How many SMs the partition asked for `sms` on `device` got (for benchmarks)."""
    _, granted = _green_context(_driver(), _index(device), sms)
    return granted


def _index(device: str) -> int:
    import torch

    index = torch.device(device).index
    return torch.cuda.current_device() if index is None else index


def _driver():
    driver = ctypes.CDLL("libcuda.so.1")
    _check(driver.cuInit(0), "cuInit")
    return driver


def _check(result: int, call: str) -> None:
    if result != 0:
        raise GreenContextError(f"{call} returned CUDA error {result}")


def _device(driver, index: int) -> ctypes.c_int:
    device = ctypes.c_int()
    _check(driver.cuDeviceGet(ctypes.byref(device), index), "cuDeviceGet")
    return device


def _split(driver, index: int, sms: int):
    """A group of at least `sms` of the device's SMs (split off the rest), as the driver describes it."""
    device, whole = _device(driver, index), ctypes.create_string_buffer(RESOURCE_BYTES)
    _check(driver.cuDeviceGetDevResource(device, whole, RESOURCE_TYPE_SM), "cuDeviceGetDevResource")
    total = _sm_count(whole)
    if not 0 < sms < total:
        raise GreenContextError(f"asked for {sms} SMs; the device has {total}")
    group, rest, groups = (
        ctypes.create_string_buffer(RESOURCE_BYTES),
        ctypes.create_string_buffer(RESOURCE_BYTES),
        ctypes.c_uint(1),
    )
    _check(
        driver.cuDevSmResourceSplitByCount(group, ctypes.byref(groups), whole, rest, 0, sms),
        "cuDevSmResourceSplitByCount",
    )
    if groups.value != 1:
        raise GreenContextError(f"the driver made {groups.value} groups of {sms} SMs")
    return group


def _sm_count(resource) -> int:
    return int.from_bytes(resource[SM_COUNT_OFFSET : SM_COUNT_OFFSET + 4], "little")


def _green_context(driver, index: int, sms: int) -> tuple[ctypes.c_void_p, int]:
    key = (index, sms)
    if key not in _contexts:
        group = _split(driver, index, sms)
        desc, context = ctypes.c_void_p(), ctypes.c_void_p()
        _check(driver.cuDevResourceGenerateDesc(ctypes.byref(desc), group, 1), "cuDevResourceGenerateDesc")
        _check(
            driver.cuGreenCtxCreate(ctypes.byref(context), desc, _device(driver, index), GREEN_CTX_DEFAULT_STREAM),
            "cuGreenCtxCreate",
        )
        _contexts[key] = context, _sm_count(group)
    return _contexts[key]


def _green_stream(index: int, sms: int, priority: int) -> tuple[int, int]:
    """A new stream of the partition asked for `sms` on device `index`: (its handle, the SMs it got)."""
    driver = _driver()
    (context, granted), stream = _green_context(driver, index, sms), ctypes.c_void_p()
    _check(
        driver.cuGreenCtxStreamCreate(ctypes.byref(stream), context, STREAM_NON_BLOCKING, priority),
        "cuGreenCtxStreamCreate",
    )
    return stream.value, granted
