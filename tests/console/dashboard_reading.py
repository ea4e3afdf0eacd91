"""Reading a deployment's numbers off the dashboard's HTML (the page, its live partial, or the
browser's DOM): requests per minute, requests in the last hour, latency percentiles, chart bars."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass
class DashboardNumbers:
    queue_depth: int
    requests_per_min: float
    last_hour: int
    latency: dict[tuple[str, str, int], float | None]
    """(route, TTFT|TTFP|E2EL, 50|90|99) -> seconds over the route's completed requests, None where
    the dashboard shows none; routes without a completed request are absent."""
    bars: list[int]
    """Requests in each of the last 60 minutes, oldest first."""


def dashboard_numbers(html: str, deployment: str) -> DashboardNumbers:
    card = html[html.index(f'data-deployment="{deployment}"') :]
    end = card.find("data-deployment=", 1)
    card = card[: end if end > 0 else None]
    latency = {}
    for route, timing, row in re.findall(r'<tr data-route="([\w.]+)" data-timing="(\w+)">(.*?)</tr>', card, re.S):
        for p, cell in re.findall(r'data-percentile="(\d+)">([^<]*)<', row):
            latency[(route, timing, int(p))] = float(cell.removesuffix(" s")) if cell.endswith(" s") else None
    return DashboardNumbers(
        queue_depth=int(_kpi(card, "queue-depth")),
        requests_per_min=float(_kpi(card, "requests-per-min")),
        last_hour=int(_kpi(card, "last-hour")),
        latency=latency,
        bars=[int(count) for count in re.findall(r'<rect data-count="(\d+)"', card)],
    )


def _kpi(card: str, name: str) -> str:
    return re.search(rf'data-kpi="{name}"><div class="value">([^<]*)<', card).group(1).strip()
