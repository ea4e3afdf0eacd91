"""Prometheus metrics of the serving path, kept in Redis so every web process and node adds
to the same counters (multi-process safe without PROMETHEUS_MULTIPROC_DIR), rendered with
prometheus_client's exposition format at GET /metrics.

- omnistage_requests_total{deployment, route, status}               counter
- omnistage_request_duration_seconds{deployment, route, status}     histogram (E2EL)
- omnistage_time_to_first_token_seconds{deployment, route}          histogram (TTFT)
- omnistage_time_to_first_packet_seconds{deployment, route}         histogram (TTFP, audio)
- omnistage_time_per_output_token_seconds{deployment, route}        histogram (TPOT)
- omnistage_queue_seconds{deployment, route}                        histogram
- omnistage_audio_real_time_factor{deployment, route}                histogram (RTF: E2EL over the
                                                                     seconds of audio produced)
- omnistage_stage_first_output_seconds{deployment, stage}            histogram: a stage's first input
                                                                     to its first output, per request
- omnistage_stage_duration_seconds{deployment, stage}                histogram: a stage's first input
                                                                     to its finish, per request
- omnistage_history_pending                                          gauge: requests whose history
                                                                     the writer has not written yet

Counters are written when a request's history row is closed in the database (history_apply.py:
once per request, by whoever writes it first).
Connector transfers per replica come from the replica rows (control_plane.deployments.metrics);
replica states, stage steps, queues and devices from the replicas' heartbeats
(control_plane.deployments.metrics_replicas). docs/operations.md lists every series.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable

import redis
from django.http import HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from control_plane.deployments.metrics import ConnectorCollector
from control_plane.deployments.metrics_replicas import ReplicaCollector
from control_plane.inference.metrics_access import metrics_refusal
from control_plane.inference.redis_names import pending_all
from control_plane.redis_client import get_redis, shared_redis
from stages import streams

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, math.inf)
HISTOGRAMS = {
    "request_duration_seconds": ("e2el_s", True, "End-to-end latency of a request."),
    "time_to_first_token_seconds": ("ttft_s", False, "Time from submission to the first text token."),
    "time_to_first_packet_seconds": ("ttfp_s", False, "Time from submission to the first audio packet."),
    "time_per_output_token_seconds": ("tpot_s", False, "Mean time between text tokens after the first."),
    "queue_seconds": ("queue_s", False, "Time a request waited for a replica of its first stage."),
    "audio_real_time_factor": ("rtf", False, "End-to-end latency over the seconds of audio produced (RTF)."),
}
STAGE_HISTOGRAMS = {
    "stage_first_output_seconds": ("first_output_s", "Time from a stage's first input to its first output."),
    "stage_duration_seconds": ("duration_s", "Time from a stage's first input to its finish."),
}
ROW_FIELDS = ("deployment_name", "route", "status", "stage_metrics", *(field for field, _, _ in HISTOGRAMS.values()))
"""The fields of a history row that `observe` reads."""
_SEP = "\x1f"


def _key(name: str) -> str:
    return f"{streams.PREFIX}:metrics:{name}"


def observe(rows: Iterable) -> None:
    """Count finished requests and add their timings to the histograms: the increments of all
    `rows` summed first, so a batch of similar requests costs one HINCRBY per series field, not
    one per request and bucket."""
    counts: Counter[tuple[str, str]] = Counter()
    sums: defaultdict[tuple[str, str], float] = defaultdict(float)
    for row in rows:
        deployment = row.deployment_name or "-"
        route = row.route
        counts[_key("requests_total"), _SEP.join((deployment, route, row.status))] += 1
        for name, (field, by_status, _) in HISTOGRAMS.items():
            value = getattr(row, field)
            if value is None:
                continue
            labels = (deployment, route, row.status) if by_status else (deployment, route)
            _add(counts, sums, _key(name), _SEP.join(labels), value)
        for stage, measures in (row.stage_metrics or {}).items():
            for name, (field, _) in STAGE_HISTOGRAMS.items():
                if measures.get(field) is not None:
                    _add(counts, sums, _key(name), _SEP.join((deployment, stage)), measures[field])
    if not counts:
        return
    pipe = _pooled().pipeline(transaction=False)
    for (key, field), amount in counts.items():
        pipe.hincrby(key, field, amount)
    for (key, field), amount in sums.items():
        pipe.hincrbyfloat(key, field, amount)
    pipe.execute()


def _add(counts: Counter, sums: defaultdict, key: str, base: str, value: float) -> None:
    """One observation of a histogram series kept in the Redis hash `key` (cumulative buckets)."""
    for bound in BUCKETS:
        if value <= bound:
            counts[key, f"{base}{_SEP}le={_BOUND_NAMES[bound]}"] += 1
    sums[key, f"{base}{_SEP}sum"] += float(value)
    counts[key, f"{base}{_SEP}count"] += 1


_clients: dict[str, redis.Redis] = {}


def _pooled() -> redis.Redis:
    """One pooled client per Redis URL (observe runs once per request)."""
    from django.conf import settings

    url = settings.REDIS_URL
    if url not in _clients:
        _clients[url] = shared_redis(url)
    return _clients[url]


def _bound(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(bound)


_BOUND_NAMES = {bound: _bound(bound) for bound in BUCKETS}


class RedisCollector:
    def __init__(self, client: redis.Redis):
        self.client = client

    def collect(self):
        totals = CounterMetricFamily(
            "omnistage_requests",
            "Requests by deployment, route and final status.",
            labels=["deployment", "route", "status"],
        )
        for field, count in self.client.hgetall(_key("requests_total")).items():
            totals.add_metric(field.decode().split(_SEP), float(count))
        yield totals
        for name, (_, by_status, documentation) in HISTOGRAMS.items():
            labels = ["deployment", "route", "status"] if by_status else ["deployment", "route"]
            yield self._histogram(name, documentation, labels)
        for name, (_, documentation) in STAGE_HISTOGRAMS.items():
            yield self._histogram(name, documentation, ["deployment", "stage"])
        yield GaugeMetricFamily(
            "omnistage_history_pending",
            "Requests whose history rows the history writer has not written to the database yet.",
            value=float(self.client.scard(pending_all())),
        )

    def _histogram(self, name: str, documentation: str, labels: list[str]) -> HistogramMetricFamily:
        family = HistogramMetricFamily(f"omnistage_{name}", documentation, labels=labels)
        for label_values, series in _series(self.client.hgetall(_key(name)), len(labels)).items():
            buckets = [(_bound(b), float(series.get(f"le={_bound(b)}", 0))) for b in BUCKETS]
            family.add_metric(list(label_values), buckets, float(series.get("sum", 0.0)))
        return family


def _series(raw: dict[bytes, bytes], label_count: int) -> dict[tuple[str, ...], dict[str, float]]:
    series: dict[tuple[str, ...], dict[str, float]] = {}
    for field, value in raw.items():
        parts = field.decode().split(_SEP)
        labels, measure = tuple(parts[:label_count]), parts[label_count]
        series.setdefault(labels, {})[measure] = float(value)
    return series


def render() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    client = get_redis()
    try:
        registry.register(RedisCollector(client))
        registry.register(ConnectorCollector())
        registry.register(ReplicaCollector())
        return generate_latest(registry)
    finally:
        client.close()


@require_GET
def metrics_view(request):
    """GET /metrics (Prometheus text format) for a scraper's token or a staff session (metrics_access.py).
    503 when Redis cannot be read."""
    refusal = metrics_refusal(request)
    if refusal is not None:
        return refusal
    try:
        body = render()
    except redis.RedisError as error:
        return HttpResponse(f"# metrics unavailable: {error}\n", status=503, content_type="text/plain")
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
