"""scripts/gpu_device_metrics.py's checks, without a GPU: it reads the device series from a /metrics
exposition as prometheus_client writes it, passes plausible GPU readings and names each implausible or
missing one."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from procs import REPO
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

GIB = 1 << 30
TORCH_TOTAL = 140 * GIB


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("gpu_device_metrics", REPO / "scripts" / "gpu_device_metrics.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def exposition(used: float, total: float, busy: float | None, replica: float | None) -> str:
    """/metrics as the control plane renders it (prometheus_client), with a cpu device beside the GPU."""
    device = ["host", "device"]
    families = {
        "used": GaugeMetricFamily("omnistage_device_memory_used_bytes", "used", labels=device),
        "total": GaugeMetricFamily("omnistage_device_memory_total_bytes", "total", labels=device),
        "busy": GaugeMetricFamily("omnistage_device_utilization_ratio", "busy", labels=device),
        "replica": GaugeMetricFamily("omnistage_replica_memory_bytes", "process",
                                     labels=["deployment", "stage", "replica", "device"]),
    }  # fmt: skip
    families["used"].add_metric(["gpu-host", "cuda:0"], used)
    families["used"].add_metric(["gpu-host", "cpu"], 3 * GIB)
    families["total"].add_metric(["gpu-host", "cuda:0"], total)
    families["total"].add_metric(["gpu-host", "cpu"], 64 * GIB)
    if busy is not None:
        families["busy"].add_metric(["gpu-host", "cuda:0"], busy)
    if replica is not None:
        families["replica"].add_metric(["bench", "main", "a-b", "cuda:0"], replica)

    class Collector:
        def collect(self):
            yield from families.values()

    registry = CollectorRegistry()
    registry.register(Collector())
    return generate_latest(registry).decode()


def test_plausible_gpu_readings_pass(script):
    samples = script.parse_metrics(exposition(12 * GIB, TORCH_TOTAL, 0.37, 9 * GIB))
    (busy,) = script.named(samples, "omnistage_device_utilization_ratio", device="cuda:0")
    assert busy.labels == {"host": "gpu-host", "device": "cuda:0"} and busy.value == pytest.approx(0.37)
    assert script.device_failures(samples, "cuda:0", TORCH_TOTAL) == []
    assert len(script.device_lines(samples, "cuda:0")) == 4


def test_each_implausible_or_missing_reading_is_named(script):
    samples = script.parse_metrics(exposition(0, 80 * GIB, 1.5, None))
    failures = "\n".join(script.device_failures(samples, "cuda:0", TORCH_TOTAL))
    assert "no omnistage_replica_memory_bytes" in failures
    assert "total" in failures and "not within 5%" in failures
    assert "used 0 is not in" in failures
    assert "utilisation 1.5 is not in [0, 1]" in failures
    missing = script.device_failures(script.parse_metrics(exposition(GIB, TORCH_TOTAL, None, GIB)), "cuda:0",
                                     TORCH_TOTAL)  # fmt: skip
    assert missing == ["no omnistage_device_utilization_ratio sample for device 'cuda:0'"]
