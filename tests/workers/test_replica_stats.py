"""What a replica host measures about its stage and device and sends with its heartbeat: step
times, batch sizes and units (aggregated, not per step), the queue wait of a request's first
input, the device's memory, and the phases of its load."""

from __future__ import annotations

import math
import signal

import pytest
from procs import wait_for
from replica_testing import (
    echo_spec,
    finished_output,
    forget,
    heartbeat,
    load_in_fresh_interpreter,
    send_request,
    start_host,
    tiny_llm_spec,
    unique,
)
from replica_testing import wait_state as replica_state

from stages.engine_stats import StepStats, capacity_of, clear_step_stats, inner_engine, step_stats, unit_of
from stages.protocol import StageOutput, StageRequest
from stages.replica_stats import BATCH_BOUNDS, Capacity, Histogram
from workers.device_usage import CpuClock, DeviceReader, device_usage
from workers.step_meter import StepMeter

pytestmark = pytest.mark.timeout(120)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_meter_aggregates_steps_into_histograms_and_a_rate_over_the_beat_window():
    clock = Clock()
    meter = StepMeter("tokens", clock=clock)
    meter.step(0.02, batch=3, units=3)
    meter.step(0.4, batch=1, units=1)
    meter.step(0.001, batch=0, units=0)  # no request computed: timed, no batch size
    meter.queued(0.003)
    meter.queued(-0.5)  # clocks of two hosts: never negative
    clock.now += 2.0
    stats = meter.snapshot(Capacity(kind="kv_blocks", used=3, total=10))

    assert stats.unit == "tokens" and stats.units == 4 and stats.units_per_s == pytest.approx(2.0)
    assert stats.step_seconds.count == 3 and stats.step_seconds.sum == pytest.approx(0.421)
    assert dict(stats.step_seconds.cumulative())["0.025"] == 2.0
    assert dict(stats.step_seconds.cumulative())["+Inf"] == 3.0
    assert stats.batch_size.count == 2 and dict(stats.batch_size.cumulative())["1.0"] == 1.0
    assert stats.queue_seconds.count == 2 and dict(stats.queue_seconds.cumulative())["0.001"] == 1.0
    assert stats.capacity == Capacity(kind="kv_blocks", used=3, total=10)

    clock.now += 0.1  # a beat right after another (a state change) keeps the last rate
    meter.step(0.01, batch=1, units=50)
    assert meter.snapshot().units_per_s == pytest.approx(2.0)
    clock.now += 1.0
    assert meter.snapshot().units_per_s == pytest.approx(50 / 1.1)


def test_a_histogram_puts_values_past_its_last_bound_in_the_infinite_bucket():
    histogram = Histogram.empty(BATCH_BOUNDS)
    for value in (1, 3, 300):
        histogram.observe(value)
    assert histogram.bounds[-1] is None and math.isinf(BATCH_BOUNDS[-1])
    cumulative = dict(histogram.cumulative())
    assert (cumulative["1.0"], cumulative["4.0"], cumulative["256.0"], cumulative["+Inf"]) == (1, 2, 2, 3)


class Stepping:
    unit = "frames"

    def __init__(self):
        self.last_step = StepStats(batch=2, units=8)

    def capacity(self) -> Capacity:
        return Capacity(kind="slots", used=2, total=4)


class Wrapper:
    def __init__(self, engine):
        self.engine = engine


def test_engine_stats_look_through_wrappers_and_fall_back_on_the_outputs():
    wrapped = Wrapper(Wrapper(Stepping()))
    assert isinstance(inner_engine(wrapped), Stepping) and unit_of(wrapped) == "frames"
    assert step_stats(wrapped, []) == StepStats(batch=2, units=8)
    assert capacity_of(wrapped) == Capacity(kind="slots", used=2, total=4)
    clear_step_stats(wrapped)  # the wrapper may return without stepping it: nothing is counted twice
    assert step_stats(wrapped, []) == StepStats()

    plain = object()
    outputs = [
        StageOutput(request_id="a", stage_id=0, seq=0, token_ids=[1, 2]),
        StageOutput(request_id="b", stage_id=0, seq=0, text="x"),
        StageOutput(request_id="a", stage_id=0, seq=1, token_ids=[3]),
    ]
    assert unit_of(plain) == "outputs" and capacity_of(plain) is None
    assert step_stats(plain, outputs) == StepStats(batch=2, units=4)


def test_the_cpu_reading_has_the_machines_memory_and_the_process():
    clock = CpuClock()
    sum(i * i for i in range(300_000))  # some CPU time for the clock
    wait_for(lambda: clock.utilization() is not None, timeout=5, interval=0.3, what="a CPU reading")
    usage = device_usage("cpu", clock, label="cpu")
    assert usage.device == "cpu" and usage.memory_total_bytes > usage.memory_used_bytes > 0
    assert usage.process_bytes > 0 and 0.0 <= usage.utilization <= 1.0
    cuda = device_usage("cuda:0", label="cuda:3")  # torch is not imported here: nothing to read but NVML
    assert cuda.device == "cuda:3" and cuda.process_bytes is None


def test_the_device_reader_reads_at_most_once_a_heartbeat_interval():
    clock = Clock()
    reader = DeviceReader("cpu", "cpu", 2.0, clock=clock)
    first = reader.latest
    assert first.memory_total_bytes > 0
    clock.now += 1.0
    reader.refresh()
    assert reader.latest is first
    clock.now += 1.0
    reader.refresh()
    assert reader.latest is not first and reader.latest.process_bytes > 0
    gpu = DeviceReader("cuda:0", "cuda:2", 2.0, driver=False)  # a group host's: no driver call
    assert gpu.latest.device == "cuda:2" and gpu.latest.memory_used_bytes is None


def test_loading_an_engine_reports_its_phases_in_order_and_imports_torch_only_for_torch_families():
    loaded = load_in_fresh_interpreter(echo_spec(unique("replica"), unique("deployment")))
    heard, imported_torch = loaded["heard"], loaded["torch"]
    fractions = [fraction for fraction, _ in heard]
    assert fractions == sorted(fractions) and 0 < fractions[0] and fractions[-1] < 1.0
    assert [phase for _, phase in heard][:2] == [
        "importing the model family",
        "loading weights and building the engine",
    ]
    assert not imported_torch

    loaded = load_in_fresh_interpreter(tiny_llm_spec(unique("replica"), unique("deployment")))
    heard, imported_torch = loaded["heard"], loaded["torch"]
    assert [phase for _, phase in heard][:3] == ["importing the model family", "importing torch",
                                                 "loading weights and building the engine"]  # fmt: skip
    assert imported_torch


@pytest.fixture
def echo_replica(client, redis_url, tmp_path):
    replica_id, deployment_id = unique("replica"), unique("deployment")
    host = start_host(echo_spec(replica_id, deployment_id, tokens_per_step=2), redis_url, tmp_path / "host.log")
    yield replica_id, deployment_id
    host.signal(signal.SIGKILL)
    host.stop()
    forget(client, replica_id, deployment_id)


def test_a_replica_heartbeat_carries_its_steps_queue_waits_and_device(client, echo_replica):
    replica_id, deployment_id = echo_replica
    ready = replica_state(client, replica_id, "READY")
    assert ready.stats is not None and ready.stats.step_seconds.count == 0 and ready.phase == ""
    for request_id in ("m1", "m2"):
        send_request(client, replica_id, StageRequest(request_id=request_id, prompt="one two three four five six"))
    for request_id in ("m1", "m2"):
        finished_output(client, deployment_id, request_id)

    def measured():
        status = heartbeat(client, replica_id)
        return status if status is not None and status.stats.queue_seconds.count >= 2 else None

    status = wait_for(measured, timeout=20, what="the requests in the heartbeat's stats")
    stats = status.stats
    assert stats.units >= 6 and stats.step_seconds.count >= 2 and stats.batch_size.count >= 2
    assert stats.step_seconds.sum > 0 and sum(stats.batch_size.counts) == stats.batch_size.count
    usage = status.device_usage
    assert usage.device == "cpu" and usage.memory_total_bytes > 0 and usage.process_bytes > 0
