"""A deployment's request history as time series: latency percentiles and throughput per bucket.

The rows are bucketed in SQL with Django's `Trunc` (minutes over the last hour, hours over the
last day), which works on SQLite and PostgreSQL alike; counts are grouped there too. Percentiles
are taken in Python over the completed rows' timings of each bucket (two columns per row), the
way the dashboard takes them: a failed or refused request ends in milliseconds and would pull
them down.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db.models import Count, DateTimeField
from django.db.models.functions import Trunc
from django.utils import timezone

from control_plane.inference.models import InferenceRequest, Status


@dataclass(frozen=True)
class SeriesWindow:
    name: str
    span: timedelta
    bucket: str
    """A `Trunc` kind."""
    bucket_s: int


WINDOWS = {
    "hour": SeriesWindow("hour", timedelta(hours=1), "minute", 60),
    "day": SeriesWindow("day", timedelta(days=1), "hour", 3600),
}
LATENCY_FIELDS = ("ttft_s", "ttfp_s", "e2el_s")
PERCENTILES = (50, 95)


def percentile(values: list[float], p: int) -> float | None:
    """The nearest-rank percentile of `values` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[rank]


@dataclass
class RequestSeries:
    window: str
    bucket_s: int
    times: list[int]
    """Each bucket's start, UNIX seconds."""
    latency: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)
    """`ttft_s` -> `p50` -> one value per bucket (None: no completed request with that timing)."""
    completed_per_min: list[float] = field(default_factory=list)
    failed_per_min: list[float] = field(default_factory=list)
    """Requests that ended failed or cancelled, per minute."""
    totals: dict[str, int] = field(default_factory=dict)


def request_series(*, deployment_name: str, window: str = "hour", now: datetime | None = None) -> RequestSeries:
    """The series of `deployment_name`'s requests created in the last `window` ("hour" or "day")."""
    spec = WINDOWS[window]
    now = now or timezone.now()
    first = _bucket_start(now - spec.span, spec.bucket_s) + spec.bucket_s
    times = list(range(first, _bucket_start(now, spec.bucket_s) + 1, spec.bucket_s))
    index = {t: i for i, t in enumerate(times)}
    rows = InferenceRequest.objects.filter(
        deployment_name=deployment_name, created_at__gte=datetime.fromtimestamp(first, tz=UTC)
    ).annotate(bucket=Trunc("created_at", spec.bucket, output_field=DateTimeField()))
    series = RequestSeries(window=spec.name, bucket_s=spec.bucket_s, times=times)
    _add_counts(series, rows, index)
    _add_latency(series, rows.filter(status=Status.COMPLETED), index)
    return series


def _bucket_start(moment: datetime, bucket_s: int) -> int:
    seconds = int(moment.timestamp())
    return seconds - seconds % bucket_s


def _add_counts(series: RequestSeries, rows, index: dict[int, int]) -> None:
    per_min = 60 / series.bucket_s
    completed, failed = [0] * len(index), [0] * len(index)
    totals = {status: 0 for status in Status.values}
    for row in rows.values("bucket", "status").annotate(n=Count("id")).order_by():
        totals[row["status"]] = totals.get(row["status"], 0) + row["n"]
        slot = index.get(int(row["bucket"].timestamp()))
        if slot is None:
            continue
        if row["status"] == Status.COMPLETED:
            completed[slot] += row["n"]
        elif row["status"] in (Status.FAILED, Status.CANCELLED):
            failed[slot] += row["n"]
    series.completed_per_min = [round(n * per_min, 4) for n in completed]
    series.failed_per_min = [round(n * per_min, 4) for n in failed]
    series.totals = totals


def _add_latency(series: RequestSeries, completed, index: dict[int, int]) -> None:
    values = {name: [[] for _ in index] for name in LATENCY_FIELDS}
    for bucket, *timings in completed.values_list("bucket", *LATENCY_FIELDS).order_by():
        slot = index.get(int(bucket.timestamp()))
        if slot is None:
            continue
        for name, value in zip(LATENCY_FIELDS, timings, strict=True):
            if value is not None:
                values[name][slot].append(value)
    series.latency = {
        name: {f"p{p}": [percentile(bucket, p) for bucket in buckets] for p in PERCENTILES}
        for name, buckets in values.items()
    }
