"""What a deployment page's charts draw, as JSON: its request series over a window (latency
percentiles, throughput) and the per-stage load its replicas report now (the page keeps the
samples it polled, so the stage chart shows the minutes it has been open)."""

from __future__ import annotations

import time
from dataclasses import asdict

from control_plane.deployments.stage_load import stage_load
from control_plane.inference.request_series import WINDOWS, request_series

DEFAULT_WINDOW = "hour"


def chart_window(value: str | None) -> str:
    return value if value in WINDOWS else DEFAULT_WINDOW


def deployment_charts(deployment, window: str) -> dict:
    return {
        "deployment": deployment.name,
        "series": asdict(request_series(deployment_name=deployment.name, window=window)),
        "stages": {"at": round(time.time(), 3), "load": stage_load(deployment=deployment)},
    }
