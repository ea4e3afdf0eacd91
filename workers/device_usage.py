"""Memory and utilisation of a device, as cheaply as the device tells them.

- cpu: the machine's memory from /proc/meminfo (used = MemTotal - MemAvailable), the process's
  RSS from /proc/self/statm, and its CPU use over the window since the last reading (os.times),
  as a share of the machine's cores (1.0: every core busy with this process).
- cuda:N: `torch.cuda.mem_get_info` (only when torch is already imported in this process: a
  pool heartbeat never imports it), what torch's allocator reserved, and NVML's utilisation and
  memory when `pynvml` (nvidia-ml-py) is importable and finds the driver (the pool heartbeat uses NVML
  alone). On a machine without an NVIDIA driver NVML's library is looked for once per process.

A replica host reads its device through a `DeviceReader` on its serving loop, between engine steps
(at most once per heartbeat interval), never from the heartbeat thread: a CUDA graph captured in
the default (global) mode fails when another thread calls into the driver meanwhile, and captures
happen while the engine loads or inside a step. A host whose engines step on threads of their own
(a stage group) skips the driver call and reports the allocator's numbers alone.

Everything that cannot be read is None; a reading never raises.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from stages.replica_stats import DeviceUsage

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def machine_memory() -> tuple[int | None, int | None]:
    """(used, total) bytes of this machine's memory."""
    try:
        with open("/proc/meminfo") as lines:
            fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in lines if line.count(":") == 1}
    except (OSError, ValueError, IndexError):
        return None, None
    total, available = fields.get("MemTotal"), fields.get("MemAvailable")
    if total is None or available is None:
        return None, total
    return total - available, total


def process_rss() -> int | None:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


class CpuClock:
    """CPU seconds this process used per wall second since the previous reading, over the cores."""

    def __init__(self):
        self._last = (time.monotonic(), self._cpu())
        self._value: float | None = None

    @staticmethod
    def _cpu() -> float:
        times = os.times()
        return times.user + times.system

    def utilization(self) -> float | None:
        now, cpu = time.monotonic(), self._cpu()
        then, cpu_then = self._last
        if now - then >= 0.25:  # a reading sooner than that (a state change) repeats the last one
            self._last = (now, cpu)
            self._value = max(0.0, (cpu - cpu_then) / (now - then) / (os.cpu_count() or 1))
        return self._value


def cuda_index(device: str) -> int:
    _, _, index = device.partition(":")
    return int(index) if index.isdigit() else 0


def torch_cuda_memory(index: int, driver: bool = True) -> tuple[int | None, int | None, int | None]:
    """(used, total, reserved by this process) from torch, if this process has imported it and
    initialised CUDA; `driver=False`: no driver call (used is then unknown)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None, None, None
    try:
        reserved = int(torch.cuda.memory_reserved(index))
        if not driver:
            return None, int(torch.cuda.get_device_properties(index).total_memory), reserved
        free, total = torch.cuda.mem_get_info(index)
        return total - free, total, reserved
    except Exception:  # noqa: BLE001 - a driver hiccup must not stop a heartbeat
        return None, None, None


def nvml_device(index: int) -> tuple[int | None, int | None, float | None]:
    """(used, total, utilisation 0..1) from NVML, when `pynvml` is importable and the driver's library
    loads; each of them None when NVML cannot say (utilisation is not supported on a MIG slice)."""
    nvml = _nvml()
    if nvml is None:
        return None, None, None
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(_physical_index(index))
    except Exception:  # noqa: BLE001 - no such GPU
        return None, None, None
    used = total = utilization = None
    try:
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        used, total = int(memory.used), int(memory.total)
    except Exception:  # noqa: BLE001 - a driver hiccup must not stop a heartbeat
        pass
    try:
        utilization = nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0
    except Exception:  # noqa: BLE001
        pass
    return used, total, utilization


_nvml_lock = threading.Lock()
_nvml_module = None
_nvml_absent = False


def _nvml():
    """`pynvml`, initialised once in this process; None without it or without an NVIDIA driver (a machine
    without one is not asked again: loading a missing library on every heartbeat costs for nothing)."""
    global _nvml_module, _nvml_absent
    with _nvml_lock:
        if _nvml_module is not None or _nvml_absent:
            return _nvml_module
        try:
            import pynvml
        except ImportError:
            _nvml_absent = True
            return None
        try:
            pynvml.nvmlInit()
        except Exception as error:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
            _nvml_absent = type(error).__name__ in NVML_FOR_GOOD
            return None
        _nvml_module = pynvml
        return pynvml


NVML_FOR_GOOD = frozenset({"NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded", "NVMLError_FunctionNotFound"})
"""Failures of nvmlInit that another attempt in this process cannot mend."""


def _physical_index(index: int) -> int:
    """NVML counts every GPU of the machine; CUDA_VISIBLE_DEVICES renumbers the visible ones."""
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if index < len(visible) and visible[index].isdigit():
        return int(visible[index])
    return index


def device_usage(
    device: str, cpu_clock: CpuClock | None = None, *, label: str | None = None, driver: bool = True
) -> DeviceUsage:
    """`device` as this process names it; `label` as the deployment does (a pinned host's `cuda:0`
    is the deployment's `cuda:N`)."""
    usage = _usage(device, cpu_clock, driver)
    usage.device = label or device
    return usage


class DeviceReader:
    """The replica host's device reading: refreshed on its serving loop, read by its heartbeat."""

    def __init__(self, device: str, label: str, interval_s: float, *, driver: bool = True, clock=time.monotonic):
        self.device, self.label, self.interval_s, self.driver, self.clock = device, label, interval_s, driver, clock
        self.cpu = CpuClock()
        self._read_at: float | None = None
        self.latest = DeviceUsage(device=label)
        self.refresh()

    def refresh(self) -> None:
        now = self.clock()
        if self._read_at is not None and now - self._read_at < self.interval_s:
            return
        self._read_at = now
        self.latest = device_usage(self.device, self.cpu, label=self.label, driver=self.driver)


def _usage(device: str, cpu_clock: CpuClock | None, driver: bool) -> DeviceUsage:
    if device.startswith("cuda"):
        index = cuda_index(device)
        used, total, allocated = torch_cuda_memory(index, driver)
        nvml_used, nvml_total, utilization = nvml_device(index)
        return DeviceUsage(
            device=device,
            memory_used_bytes=used if used is not None else nvml_used,
            memory_total_bytes=total if total is not None else nvml_total,
            process_bytes=allocated,
            utilization=utilization,
        )
    used, total = machine_memory()
    return DeviceUsage(
        device=device,
        memory_used_bytes=used,
        memory_total_bytes=total,
        process_bytes=process_rss(),
        utilization=cpu_clock.utilization() if cpu_clock is not None else None,
    )
