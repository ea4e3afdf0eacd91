"""Replica and stage series for /metrics, read at scrape time: states from the replica rows, the
rest from the replicas' heartbeat keys (`ReplicaStatus.stats`, `.device_usage`) and the worker
pools' heartbeats. A replica without a live heartbeat has a state and nothing else.

Labels: `deployment`, `stage` (the stage, or a group's entry stage) and `replica` (its index
within the stage: it stays the same across restarts, so series do not pile up); devices by
`host` and `device`. Totals and histograms count since the replica host started.

- omnistage_replica_state{deployment, stage, replica, state}            gauge, 1 for its state
- omnistage_stage_queue_depth{deployment, stage, replica}               gauge: inputs waiting
- omnistage_stage_running_requests{deployment, stage, replica}          gauge
- omnistage_stage_queue_seconds{deployment, stage, replica}             histogram: a request's
                                                                        first input in the stream
- omnistage_stage_step_seconds{deployment, stage, replica}              histogram
- omnistage_stage_batch_size{deployment, stage, replica}                histogram: requests per step
- omnistage_stage_output_units_total{deployment, stage, replica, unit}  counter: tokens, frames, steps
- omnistage_stage_output_units_per_second{..., unit}                    gauge: over the last beat
- omnistage_stage_capacity_used{deployment, stage, replica, kind}       gauge: kv_blocks or slots
- omnistage_stage_capacity_total{deployment, stage, replica, kind}      gauge
- omnistage_replica_memory_bytes{deployment, stage, replica, device}    gauge: the host process's
                                                                        RSS (cpu) or torch's reserve
- omnistage_device_memory_used_bytes{host, device}                      gauge
- omnistage_device_memory_total_bytes{host, device}                     gauge
- omnistage_device_utilization_ratio{host, device}                      gauge: GPU busy (NVML) or,
                                                                        for cpu, the replica hosts'
                                                                        share of the machine's cores
"""

from __future__ import annotations

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from control_plane.deployments.heartbeat_devices import device_readings
from control_plane.deployments.heartbeats import live_pools, replica_statuses
from control_plane.deployments.models import DeploymentState, Replica
from stages.replica_stats import Histogram

REPLICA = ["deployment", "stage", "replica"]
DEVICE = ["host", "device"]


def _gauge(name: str, documentation: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"omnistage_{name}", documentation, labels=labels)


def _histogram(name: str, documentation: str) -> HistogramMetricFamily:
    return HistogramMetricFamily(f"omnistage_stage_{name}", documentation, labels=REPLICA)


class ReplicaCollector:
    def collect(self):
        replicas = list(Replica.objects.select_related("deployment").only("id", "stage", "index", "state",
                                                                          "deployment__name"))  # fmt: skip
        try:
            statuses = replica_statuses([str(replica.id) for replica in replicas])
            pools = live_pools()
        except redis.RedisError:
            statuses, pools = {}, {}
        yield self._states(replicas)
        live = [(replica, statuses[str(replica.id)]) for replica in replicas if str(replica.id) in statuses]
        yield from self._stages(live)
        yield from self._devices(live, pools)

    def _states(self, replicas: list[Replica]) -> GaugeMetricFamily:
        family = _gauge("replica_state", "The replica's lifecycle state (1 for the state it is in).",
                        [*REPLICA, "state"])  # fmt: skip
        for replica in replicas:
            for state in DeploymentState.values:
                family.add_metric([*_labels(replica), state], 1.0 if replica.state == state else 0.0)
        return family

    def _stages(self, live: list):
        depth = _gauge("stage_queue_depth", "Inputs waiting in the replica's input stream.", REPLICA)
        running = _gauge("stage_running_requests", "Requests the replica is running.", REPLICA)
        histograms = {
            "queue_seconds": _histogram(
                "queue_seconds", "Time a request's first input waited in the replica's stream."
            ),
            "step_seconds": _histogram("step_seconds", "Time of one engine step."),
            "batch_size": _histogram("batch_size", "Requests computed in one engine step."),
        }
        units = CounterMetricFamily("omnistage_stage_output_units", "Tokens, codec frames or denoising steps "
                                    "the stage produced.", labels=[*REPLICA, "unit"])  # fmt: skip
        rate = _gauge("stage_output_units_per_second", "Units produced per second over the last heartbeat.",
                      [*REPLICA, "unit"])  # fmt: skip
        used = _gauge("stage_capacity_used", "KV-cache blocks or batch slots in use.", [*REPLICA, "kind"])
        total = _gauge("stage_capacity_total", "KV-cache blocks or batch slots the engine has.", [*REPLICA, "kind"])
        for replica, status in live:
            labels = _labels(replica)
            depth.add_metric(labels, float(status.queue_depth))
            running.add_metric(labels, float(status.running))
            stats = status.stats
            if stats is None:
                continue
            for field, family in histograms.items():
                _add_histogram(family, labels, getattr(stats, field))
            units.add_metric([*labels, stats.unit], float(stats.units))
            rate.add_metric([*labels, stats.unit], float(stats.units_per_s))
            if stats.capacity is not None:
                used.add_metric([*labels, stats.capacity.kind], float(stats.capacity.used))
                total.add_metric([*labels, stats.capacity.kind], float(stats.capacity.total))
        yield from (depth, running, *histograms.values(), units, rate, used, total)

    def _devices(self, live: list, pools: dict):
        process = _gauge("replica_memory_bytes", "Memory of the replica's host process: its RSS on cpu, "
                         "what torch reserved on a GPU.", [*REPLICA, "device"])  # fmt: skip
        for replica, status in live:
            usage = status.device_usage
            if usage is not None and usage.process_bytes is not None:
                process.add_metric([*_labels(replica), usage.device], float(usage.process_bytes))
        used = _gauge("device_memory_used_bytes", "Memory in use on the device (the machine's, for cpu).", DEVICE)
        total = _gauge("device_memory_total_bytes", "Memory of the device (the machine's, for cpu).", DEVICE)
        busy = _gauge("device_utilization_ratio", "GPU utilisation (NVML), or for cpu the replica hosts' "
                      "share of the machine's cores.", DEVICE)  # fmt: skip
        for (host, device), reading in sorted(device_readings([status for _, status in live], pools).items()):
            if reading.memory_used_bytes is not None:
                used.add_metric([host, device], float(reading.memory_used_bytes))
            if reading.memory_total_bytes is not None:
                total.add_metric([host, device], float(reading.memory_total_bytes))
            if reading.utilization is not None:
                busy.add_metric([host, device], float(reading.utilization))
        yield from (process, used, total, busy)


def _labels(replica: Replica) -> list[str]:
    return [replica.deployment.name, replica.stage, str(replica.index)]


def _add_histogram(family: HistogramMetricFamily, labels: list[str], histogram: Histogram) -> None:
    if histogram.counts:
        family.add_metric(labels, histogram.cumulative(), histogram.sum)
