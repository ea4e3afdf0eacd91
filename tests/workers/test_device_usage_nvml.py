"""NVML through the real `pynvml` (nvidia-ml-py) on a machine without an NVIDIA driver: nvmlInit fails with
NVMLError_LibraryNotFound, no reading raises, the GPU's NVML fields are None, the CPU readings are the
same as without NVML, and the library is not looked for again on every reading."""

from __future__ import annotations

import pytest

from workers import device_usage as usage_module
from workers.device_usage import CpuClock, device_usage, nvml_device
from workers.pool_heartbeat import devices_usage

pynvml = pytest.importorskip("pynvml")


@pytest.fixture
def no_driver(monkeypatch):
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    monkeypatch.setattr(usage_module, "_nvml_module", None)
    monkeypatch.setattr(usage_module, "_nvml_absent", False)


def test_without_a_driver_nvml_reads_nothing_and_raises_nothing(no_driver, monkeypatch):
    attempts = []
    real_init = pynvml.nvmlInit

    def counted_init(*args, **kwargs):
        attempts.append(1)
        return real_init(*args, **kwargs)

    monkeypatch.setattr(pynvml, "nvmlInit", counted_init)
    assert nvml_device(0) == (None, None, None)
    assert nvml_device(1) == (None, None, None)
    assert len(attempts) == 1  # LibraryNotFound is for good: not looked for again

    gpu = device_usage("cuda:0", label="cuda:0")
    assert (gpu.memory_used_bytes, gpu.memory_total_bytes, gpu.utilization) == (None, None, None)
    pool = devices_usage(["cpu", "cuda:0"])
    assert pool[1]["device"] == "cuda:0" and pool[1]["memory_total_bytes"] is None
    assert pool[0]["memory_total_bytes"] > pool[0]["memory_used_bytes"] > 0


def test_the_cpu_reading_is_the_same_with_nvml_installed(no_driver, monkeypatch):
    with_nvml = device_usage("cpu", CpuClock(), label="cpu")
    monkeypatch.setattr(usage_module, "_nvml_absent", True)
    monkeypatch.setattr(usage_module, "nvml_device", lambda index: pytest.fail("the cpu reading asked NVML"))
    without = device_usage("cpu", CpuClock(), label="cpu")
    assert with_nvml.device == without.device == "cpu"
    assert with_nvml.memory_total_bytes == without.memory_total_bytes > 0
    assert with_nvml.memory_used_bytes > 0 and without.memory_used_bytes > 0 and with_nvml.process_bytes > 0
