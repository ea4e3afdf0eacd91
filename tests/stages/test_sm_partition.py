"""A stream confined to a share of the GPU's SMs (stages/sm_partition.py) where the driver can make one.

What it does on a GPU (kernels confined, graphs only when captured on the stream) is measured by
benchmarks/sm_partition.py; here, the fallback a machine without the CUDA driver takes.
"""

from __future__ import annotations

import ctypes
import logging

import pytest

from stages import sm_partition


def _no_driver(monkeypatch):
    real = ctypes.CDLL

    def cdll(name, *args, **kwargs):
        if name == "libcuda.so.1":
            raise OSError("libcuda.so.1: cannot open shared object file")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(sm_partition.ctypes, "CDLL", cdll)


def test_without_the_driver_no_confined_stream_is_made_and_the_log_says_why(monkeypatch, caplog):
    _no_driver(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="stages.sm_partition"):
        assert sm_partition.partitioned_stream("cuda:0", 112) is None
    assert "cannot confine a stream to 112 SMs of cuda:0" in caplog.text
    assert "libcuda.so.1" in caplog.text


def test_a_driver_error_is_named_by_its_call(monkeypatch):
    class Driver:
        def cuInit(self, flags):
            return 0

        def cuDeviceGet(self, device, index):
            return 101  # CUDA_ERROR_INVALID_DEVICE

    monkeypatch.setattr(sm_partition.ctypes, "CDLL", lambda name: Driver())
    with pytest.raises(sm_partition.GreenContextError, match="cuDeviceGet returned CUDA error 101"):
        sm_partition._green_stream(3, 112, 0)
