"""A deployment's charts and a request's timeline, in a real browser (Debian's Chromium through
Playwright) against a live platform with an `echo-voice` deployment (echo -> voice, no model to
load): real requests through /v1, their history rows written by the history writer, then the
deployment page draws latency percentiles and throughput from them (last hour, then last day)
and a stage load chart, and a request's page draws its stages' waterfall. Screenshots go to
test-artifacts/console/."""

from __future__ import annotations

import pytest
from console_browser import chromium_page, shot
from console_stack import wait_running
from openai import OpenAI

from control_plane.accounts.services import api_key_create
from control_plane.deployments.models import Pipeline
from control_plane.deployments.services import deployment_create
from control_plane.inference.models import InferenceRequest

PASSWORD = "correct horse battery"
FAST = {"stages": {"echo": {"options": {"delay_s": 0.01}}, "voice": {"options": {"delay_s": 0.01}}}}
SPOKEN = 3

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def page(monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop
    with chromium_page() as page:
        yield page


def sign_in(page, base: str) -> None:
    page.goto(f"{base}/login/")
    page.fill("#id_username", "root")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("h1:text('Dashboard')")


def send_requests(base: str, root) -> list[str]:
    """SPOKEN answers with audio (both stages run), and one refused for a bad audio format."""
    _, secret = api_key_create(user=root, name="charts", scopes=["inference"])
    client = OpenAI(base_url=f"{base}/v1", api_key=secret, max_retries=0, timeout=60)
    ids = []
    for turn in range(SPOKEN):
        reply = client.chat.completions.create(
            model="talky", modalities=["text", "audio"], audio={"voice": "a", "format": "wav"},
            messages=[{"role": "user", "content": f"turn {turn}: say a few words about the sea"}],
        )  # fmt: skip
        ids.append(reply.id)
    with pytest.raises(Exception, match="audio.format"):
        client.chat.completions.create(
            model="talky", modalities=["text", "audio"], audio={"voice": "a", "format": "aiff"},
            messages=[{"role": "user", "content": "refused"}],
        )  # fmt: skip
    return ids


def charts_drawn_from_the_history(page, base: str) -> None:
    page.goto(f"{base}/deployments/talky/")
    page.wait_for_selector("[data-charts][data-polls]")
    summary = page.locator("[data-chart-summary]")
    assert summary.get_attribute("data-completed") == str(SPOKEN)
    assert summary.get_attribute("data-failed") == "1"
    for name in ("latency", "throughput", "stages"):
        assert page.locator(f"[data-chart='{name}'] canvas").count() == 1, name
    # every completed request has an E2EL, TTFT and TTFP: the latency lines have points
    assert int(page.get_attribute("[data-chart='latency']", "data-points")) >= 6
    data = page.evaluate("window.omniCharts.charts.latency.data")
    e2el_p50 = [value for value in data[5] if value is not None]
    rows = InferenceRequest.objects.filter(deployment_name="talky", status="completed")
    assert e2el_p50 and max(e2el_p50) <= max(row.e2el_s for row in rows) + 1e-9
    throughput = page.evaluate("window.omniCharts.charts.throughput.data")
    assert sum(throughput[1]) == SPOKEN and sum(throughput[2]) == 1  # per-minute buckets over the last hour
    labels = page.locator("[data-chart='stages'] .u-legend .u-label").all_text_contents()
    assert {"echo queue", "voice queue"} <= set(labels), labels
    shot(page, "30-deployment-charts-hour")

    page.click("button[data-window='day']")
    page.wait_for_selector("[data-charts][data-shown-window='day']")
    assert page.get_attribute("button[data-window='day']", "aria-pressed") == "true"
    assert summary.get_attribute("data-completed") == str(SPOKEN)
    throughput = page.evaluate("window.omniCharts.charts.throughput.data")
    assert len(throughput[0]) == 24 and sum(throughput[1]) == pytest.approx(SPOKEN / 60)  # per minute, hourly buckets
    shot(page, "31-deployment-charts-day")


def timeline_of_a_request(page, base: str, request_id: str) -> None:
    row = InferenceRequest.objects.get(request_id=request_id)
    page.goto(f"{base}/history/{request_id}/")
    timeline = page.locator("[data-timeline]")
    lanes = timeline.locator("[data-lane]")
    assert lanes.evaluate_all("nodes => nodes.map(n => n.dataset.lane)") == ["request", "echo", "voice"]
    assert timeline.locator("[data-lane='request'] [data-mark='TTFP']").count() == 1
    for stage in ("echo", "voice"):
        lane = timeline.locator(f"[data-lane='{stage}']")
        assert lane.locator("[data-segment='running']").count() == 1
        chunks = int(lane.get_attribute("data-chunks"))
        assert chunks == len(row.stage_metrics[stage]["output_marks_s"]) and chunks >= 2  # streamed piece by piece
    # the voice stage starts once the echo stage sent it something: after the echo stage's start
    echo_left = timeline.locator("[data-lane='echo'] .bar").first.evaluate("n => parseFloat(n.style.left)")
    voice_left = timeline.locator("[data-lane='voice'] .bar").first.evaluate("n => parseFloat(n.style.left)")
    assert voice_left >= echo_left
    assert row.stage_metrics["voice"]["started_s"] >= row.stage_metrics["echo"]["started_s"]
    shot(page, "32-request-timeline")


@pytest.mark.timeout(600)
def test_deployment_charts_and_request_timeline(console_stack, root, page):
    base = console_stack.base
    deployment_create(name="talky", pipeline=Pipeline.objects.get(name="echo-voice"), model_dir="-",
                      deploy_config=FAST)  # fmt: skip
    wait_running("talky", console_stack)
    ids = send_requests(base, root)
    console_stack.history_written()
    sign_in(page, base)
    charts_drawn_from_the_history(page, base)
    timeline_of_a_request(page, base, ids[-1])
    assert page.errors == []
