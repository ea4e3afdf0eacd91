"""The deployment charts' data (request series bucketed in SQL, per-stage load from the replicas)
and the request timeline, through Django's test client."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from control_plane.deployments.models import Pipeline
from control_plane.deployments.services import deployment_create
from control_plane.inference.models import InferenceRequest
from control_plane.inference.request_series import request_series

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 12, 3, 12, 30, 20, tzinfo=UTC)


def row(minutes_ago: float, status: str = "completed", deployment: str = "dep", **timings) -> InferenceRequest:
    return InferenceRequest.objects.create(
        request_id=f"req-{uuid.uuid4().hex[:10]}", route="chat.completions", deployment_name=deployment,
        status=status, created_at=NOW - timedelta(minutes=minutes_ago), **timings,
    )  # fmt: skip


def test_the_last_hour_in_minutes_with_percentiles_of_completed_requests():
    for e2el in (0.1, 0.2, 0.3, 0.4, 1.0):
        row(0, e2el_s=e2el, ttft_s=e2el / 10)
    row(0, status="failed", e2el_s=0.001)  # refused at once: counted, not in the percentiles
    row(5, status="cancelled")
    row(5, e2el_s=2.0, ttfp_s=0.5)
    row(61)  # before the window
    row(0, deployment="other", e2el_s=9.0)
    series = request_series(deployment_name="dep", window="hour", now=NOW)
    assert len(series.times) == 60 and series.bucket_s == 60
    assert series.times[-1] == int(datetime(2026, 12, 3, 12, 30, tzinfo=UTC).timestamp())
    assert series.completed_per_min[-1] == 5 and series.failed_per_min[-1] == 1
    assert series.completed_per_min[-6] == 1 and series.failed_per_min[-6] == 1
    assert sum(series.completed_per_min) == 6 and series.totals["completed"] == 6
    assert series.latency["e2el_s"]["p50"][-1] == 0.3 and series.latency["e2el_s"]["p95"][-1] == 1.0
    assert series.latency["ttft_s"]["p50"][-1] == pytest.approx(0.03)
    assert series.latency["ttfp_s"]["p50"][-1] is None and series.latency["ttfp_s"]["p50"][-6] == 0.5
    assert series.latency["e2el_s"]["p50"][0] is None  # an empty minute is a gap, not a zero


def test_the_last_day_in_hours_as_requests_per_minute():
    row(0, e2el_s=0.1)
    row(30, e2el_s=0.1)  # 12:00, the same hour
    row(60 * 5, e2el_s=0.1)
    row(60 * 25)  # before the window
    series = request_series(deployment_name="dep", window="day", now=NOW)
    assert len(series.times) == 24 and series.bucket_s == 3600
    assert series.completed_per_min[-1] == pytest.approx(2 / 60, abs=1e-4)
    assert series.completed_per_min[-6] == pytest.approx(1 / 60, abs=1e-4)
    assert series.totals["completed"] == 3


def test_the_charts_endpoint_serves_the_series_and_each_stages_load(root_client, pipelines):
    deployment = deployment_create(name="dep", pipeline=Pipeline.objects.get(name="echo-voice"), model_dir="-",
                                   deploy_config={})  # fmt: skip
    deployment.replicas.filter(stage="voice").update(queue_depth=3)
    InferenceRequest.objects.create(request_id="req-1", route="chat.completions", deployment_name="dep",
                                    status="completed", e2el_s=0.25)  # fmt: skip
    url = reverse("console:deployment-charts", args=["dep"])
    body = root_client.get(url).json()
    assert body["series"]["window"] == "hour" and body["series"]["totals"]["completed"] == 1
    assert [v for v in body["series"]["latency"]["e2el_s"]["p50"] if v is not None] == [0.25]  # its minute's
    assert body["stages"]["load"] == {"echo": {"queue_depth": 0}, "voice": {"queue_depth": 3}}
    assert root_client.get(url, {"window": "day"}).json()["series"]["window"] == "day"
    assert root_client.get(url, {"window": "year"}).json()["series"]["window"] == "hour"
    page = root_client.get(reverse("console:deployment", args=["dep"])).content.decode()
    assert f'data-url="{url}"' in page and "vendor/uplot.iife.min.js" in page
    assert root_client.get("/static/console/vendor/uplot.iife.min.js").status_code == 200


def test_the_charts_need_a_signed_in_user(client):
    response = client.get(reverse("console:deployment-charts", args=["dep"]))
    assert response.status_code == 302


def test_a_requests_page_draws_its_stages_waterfall(root_client, root):
    stages = {
        "thinker": {"started_s": 0.0, "duration_s": 1.0, "first_output_s": 0.2, "outputs": 5.0,
                    "output_marks_s": [0.2, 0.4, 0.6, 0.8, 1.0]},
        "talker": {"started_s": 0.3, "duration_s": 1.5, "first_output_s": 0.1, "outputs": 3.0,
                   "output_marks_s": [0.4, 1.0, 1.8]},
    }  # fmt: skip
    InferenceRequest.objects.create(request_id="req-omni", route="chat.completions", user=root, status="completed",
                                    e2el_s=2.0, ttft_s=0.2, ttfp_s=0.9, queue_s=0.05, stage_metrics=stages)  # fmt: skip
    page = root_client.get(reverse("console:history-detail", args=["req-omni"])).content.decode()
    lanes = [lane.split('"')[1] for lane in page.split("data-lane=")[1:]]
    assert lanes == ["request", "thinker", "talker"]
    talker = page.split('data-lane="talker"')[1].split("data-lane=")[0]
    assert 'data-chunks="3"' in talker and "left:15.0%" in talker  # starts at 0.3 s of 2.0 s
    assert 'data-mark="TTFP" style="left:45.0%"' in page and 'data-segment="queued"' in page

    InferenceRequest.objects.create(request_id="req-bare", route="chat.completions", user=root, status="failed")
    page = root_client.get(reverse("console:history-detail", args=["req-bare"])).content.decode()
    assert "No timings recorded for this request." in page and "data-lane=" not in page
