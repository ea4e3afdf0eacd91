"""What the dashboard shows, read from the deployments and the request history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone

from control_plane.deployments.queries import deployment_list
from control_plane.inference.models import InferenceRequest, Status
from control_plane.inference.request_series import percentile

CHART_MINUTES = 60
PERCENTILES = (50, 90, 99)
TIMINGS = (("ttft_s", "TTFT"), ("ttfp_s", "TTFP"), ("e2el_s", "E2EL"))


@dataclass
class DeploymentRow:
    deployment: object
    stages: list[dict]
    queue_depth: int
    requests_per_min: float
    latency: list[dict]
    """Per route (most completed requests first): its timings' percentiles."""
    chart: dict


def _stage_counts(deployment) -> list[dict]:
    stages: dict[str, dict] = {}
    for replica in deployment.replicas.all():
        entry = stages.setdefault(replica.label, {"stage": replica.label, "total": 0, "running": 0})
        entry["total"] += 1
        entry["running"] += replica.state == "RUNNING"
    return list(stages.values())


def _chart(times: list, now) -> dict:
    """Requests per minute over the last hour as SVG bar geometry (60 bars, 4 px apart)."""
    counts = [0] * CHART_MINUTES
    for created in times:
        minute = int((now - created).total_seconds() // 60)
        if 0 <= minute < CHART_MINUTES:
            counts[CHART_MINUTES - 1 - minute] += 1
    peak = max(counts) or 1
    bars = [{"x": i * 4, "h": round(30 * count / peak, 1), "y": round(32 - 30 * count / peak, 1), "n": count}
            for i, count in enumerate(counts)]  # fmt: skip
    return {"bars": bars, "peak": max(counts), "total": sum(counts)}


def _latency_by_route(requests: list[dict]) -> list[dict]:
    """Percentiles of completed requests only, route by route: a failed or refused request ends in
    milliseconds, and a chat's times say nothing about an image's."""
    by_route: dict[str, list[dict]] = {}
    for request in requests:
        if request["status"] == Status.COMPLETED:
            by_route.setdefault(request["route"], []).append(request)
    latency = []
    for route, completed in sorted(by_route.items(), key=lambda item: (-len(item[1]), item[0])):
        timings = []
        for field, label in TIMINGS:
            values = [r[field] for r in completed if r[field] is not None]
            timings.append({"label": label, "values": [{"p": p, "value": percentile(values, p)} for p in PERCENTILES]})
        latency.append({"route": route, "count": len(completed), "timings": timings})
    return latency


def dashboard_rows() -> list[DeploymentRow]:
    now = timezone.now()
    since = now - timedelta(minutes=CHART_MINUTES)
    recent = list(
        InferenceRequest.objects.filter(created_at__gte=since).values(
            "deployment_name", "created_at", "route", "status", "ttft_s", "ttfp_s", "e2el_s"
        )
    )
    rows = []
    for deployment in deployment_list():
        mine = [r for r in recent if r["deployment_name"] == deployment.name]
        last5 = [r for r in mine if (now - r["created_at"]).total_seconds() < 300]
        rows.append(
            DeploymentRow(
                deployment=deployment,
                stages=_stage_counts(deployment),
                queue_depth=sum(replica.queue_depth for replica in deployment.replicas.all()),
                requests_per_min=round(len(last5) / 5, 2),
                latency=_latency_by_route(mine),
                chart=_chart([r["created_at"] for r in mine], now),
            )
        )
    return rows
