"""The console in a real browser (Debian's Chromium through Playwright) against a live platform.

The main flow: sign in, deploy the tiny Qwen2.5-Omni pipeline (thinker -> talker -> code2wav)
and a tiny SD3, watch the replica hosts' log lines arrive, wait for RUNNING, chat (text streams
in several deltas, audio starts playing before the reply ends, and its audio element plays),
generate an image (the bar moves, the image appears), see HTML in prompts and in error messages
shown as text, find both requests in the history and replay the audio, create and revoke a key,
speak, and read the dashboard's rates, percentiles and chart. Another test queues video jobs on
a tiny Wan deployment. Screenshots of every page go to test-artifacts/console/.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
from console_browser import chromium_page, shot, watched
from console_data import SCRIPT
from dashboard_reading import dashboard_numbers
from django.utils import timezone
from page_probes import (
    CHOOSE_DEPLOYMENT,
    DECODED_DURATION,
    PLAYS,
    RECORD_SOCKET_EVENTS,
    WATCH_BARS,
    WATCH_REPLY_TEXT,
)
from procs import wait_for
from tiny_checkpoints import tiny_checkpoint

from control_plane.deployments.models import Deployment, Pipeline
from control_plane.deployments.services import deployment_create
from control_plane.inference.models import InferenceRequest

PASSWORD = "correct horse battery"
# The random tiny models never stop by themselves: the deploy form caps the thinker's text and
# the talker's codec codes (60 codes: 1.2 s of speech at 24 kHz) per stage, and the chat asks
# for as few tokens, so that a reply takes seconds on a small CPU machine.
THINKER_TOKENS, TALKER_CODES = 16, 60
OMNI_SAMPLING = {"thinker": f'{{"max_tokens": {THINKER_TOKENS}}}', "talker": f'{{"max_tokens": {TALKER_CODES}}}'}
OMNI_RATE = 24000
IMAGE_PROMPT = f"a lighthouse {SCRIPT}"
PLAYGROUNDS = {"chat": "#prompt", "image": "#prompt", "speech": "#input", "video": "#prompt"}

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="session")
def tiny_models() -> dict[str, Path]:
    return {name: tiny_checkpoint(name) for name in ("qwen2_5_omni", "sd3")}


@pytest.fixture(scope="session")
def tiny_video_model() -> Path:
    return tiny_checkpoint("wan")


@pytest.fixture
def browser_page(monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop
    with chromium_page() as page:
        page.context.add_init_script(RECORD_SOCKET_EVENTS)
        yield page


def sign_in(page, base: str) -> None:
    page.goto(f"{base}/")
    assert "/login/" in page.url
    shot(page, "01-login")
    page.fill("#id_username", "root")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("h1:text('Dashboard')")


def deploy(page, base: str, pipeline: str, name: str, model_dir: str, sampling: dict[str, str] | None = None) -> None:
    page.goto(f"{base}/catalog/{pipeline}/deploy/")
    page.fill("[name=name]", name)
    page.fill("[name=model_dir]", model_dir)
    for stage, value in (sampling or {}).items():
        if not page.locator(f"[name='stages.{stage}.sampling']").is_visible():
            page.click(f"[data-stage-section='{stage}'] summary")
        page.fill(f"[name='stages.{stage}.sampling']", value)
    if pipeline == "qwen2_5_omni":  # first show that a bad value is reported on its field
        page.fill("[name='stages.talker.replicas']", "0")
        page.click("form button[type=submit]:text('Deploy')")
        error = page.text_content("[data-field='stages.talker.replicas'] .errorlist")
        assert error == "must be at least 1"
        shot(page, "03b-deploy-error")
        page.fill("[name='stages.talker.replicas']", "1")
    page.click("form button[type=submit]:text('Deploy')")
    page.wait_for_url(f"{base}/deployments/{name}/")


def wait_running(page, stack, timeout_s: float = 300) -> None:
    try:
        page.wait_for_selector("[data-deployment-state]:text('RUNNING')", timeout=timeout_s * 1000)
    except Exception:
        print(stack.logs())
        raise


def logs_arrive_live(page, stack) -> None:
    """On the page opened as the deployment was created: each replica's READY line appears without a reload."""
    replicas = Deployment.objects.get(name="omni").replicas.all()
    before = {f"{r.stage}-{r.index}": page.text_content(f"[data-replica-log='{r.stage}-{r.index}']") for r in replicas}
    for replica in replicas:
        block = page.locator(f"[data-replica-log='{replica.stage}-{replica.index}'] .logs")
        try:
            block.filter(has_text=f"replica {replica.id}: READY").wait_for(timeout=300_000)
        except Exception:
            print(stack.logs())
            raise
        assert f"replica {replica.id}: READY" not in before[f"{replica.stage}-{replica.index}"]


def socket_events(page, kind: str | None = None) -> list[dict]:
    events = page.evaluate("window.socketEvents")
    return [event for event in events if kind is None or event["type"] == kind]


def chat(page, base: str) -> None:
    page.goto(f"{base}/playground/chat/?deployment=omni")
    page.evaluate(WATCH_REPLY_TEXT)
    page.fill("#prompt", "Hello, who are you?")
    page.fill("#max_tokens", str(THINKER_TOKENS))
    page.click("#chat-form button[type=submit]")
    page.wait_for_selector("[data-reply-audio]", timeout=240_000)
    texts, audio, (done,) = socket_events(page, "text"), socket_events(page, "audio"), socket_events(page, "done")

    # text streams: several deltas, arriving one after another, each shown as it came
    assert len(texts) >= 3 and texts[0]["t"] < texts[-1]["t"] < done["t"]
    shown = page.text_content("[data-reply] [data-text]")
    assert shown == "".join(event["delta"] for event in texts)
    lengths = page.evaluate("window.replyLengths")
    assert len(lengths) >= 3 and [step["length"] for step in lengths] == sorted({s["length"] for s in lengths})
    assert lengths[0]["length"] < len(shown) and lengths[0]["t"] < done["t"]

    # audio plays from its first chunk, before the reply ends, then an audio element holds all of it
    played = page.evaluate("window.omniAudio")
    assert len(audio) >= 2 and played["sampleRate"] == OMNI_RATE and played["samples"] > 0
    assert played["state"] == "running" and played["startedAt"] < done["t"]
    element = page.locator("[data-reply-audio]").element_handle()
    assert page.evaluate(DECODED_DURATION, element) == pytest.approx(played["samples"] / OMNI_RATE, rel=0.01)
    playback = page.evaluate(PLAYS, element)
    assert playback["duration"] == pytest.approx(played["samples"] / OMNI_RATE, rel=0.01)
    assert playback["currentTime"] > 0

    page.click("#view-code summary")
    assert "/v1/chat/completions" in page.text_content("[data-code='curl']")
    shot(page, "05-chat")


def generate_image(page, base: str) -> None:
    page.goto(f"{base}/playground/image/?deployment=img")
    page.evaluate(WATCH_BARS, "#image-progress > span")
    page.fill("#prompt", IMAGE_PROMPT)
    page.fill("#num_inference_steps", "6")
    page.fill("#seed", "7")
    page.click("#image-form button[type=submit]")
    page.wait_for_selector("figure[data-image] img", timeout=120_000)
    widths = [step["width"] for step in page.evaluate("window.barWidths['#image-progress > span']")]
    moving = [width for width in widths if 0 < width < 100]
    assert len(moving) >= 2 and moving == sorted(moving)  # the bar moved with the steps...
    assert widths[-1] == 100 and widths.index(100) > widths.index(moving[-1])  # ...before the image came
    assert page.evaluate("document.querySelector('figure[data-image] img').naturalWidth") == 64
    # the prompt's HTML is caption text: no element, no script ran
    assert page.text_content("figure[data-image] figcaption").startswith(IMAGE_PROMPT)
    assert page.locator("#gallery img").count() == 1 and page.locator("#gallery script").count() == 0
    page.wait_for_selector("#image-status a[data-history-link]")
    shot(page, "06-image")


def errors_are_text(page, base: str) -> None:
    """Every playground renders a server error that repeats the user's input as text (here a
    deployment name full of HTML, as a tampered form would send it)."""
    for mode, prompt_field in PLAYGROUNDS.items():
        page.goto(f"{base}/playground/{mode}/")
        page.evaluate(CHOOSE_DEPLOYMENT, SCRIPT)
        page.fill(prompt_field, f"waves <b>rolling</b> in the {mode} playground")
        page.click(f"#{mode}-form button[type=submit]")
        page.wait_for_selector("[data-error-for='deployment']:not(:empty)")
        assert page.text_content("[data-error-for='deployment']") == f"no deployment named {SCRIPT!r}"
        assert page.locator("img[src='x'], main script, main b").count() == 0
        if mode == "chat":
            assert SCRIPT in page.text_content("[data-reply].error .field-error")
        if mode == "video":
            assert SCRIPT in page.text_content("[data-job] .field-error")
            assert page.text_content("[data-job] .badge") == "failed"
    shot(page, "14-error-as-text")


def history_replay(page, base: str) -> None:
    page.goto(f"{base}/history/")
    # the chat and the image (the speech comes later), and the four runs the platform refused (a
    # deployment named with HTML): recorded as /v1 records them, their names shown as text
    assert page.locator("tr[data-request] .badge.completed").count() == 2
    assert page.locator("tr[data-request] .badge.failed").count() == len(PLAYGROUNDS)
    refused = page.locator("tr[data-request]:has(.badge.failed) [data-input]").all_text_contents()
    assert sorted(refused) == sorted(f"waves <b>rolling</b> in the {mode} playground" for mode in PLAYGROUNDS)
    image_row = page.locator("tr[data-request]:has(td:text('images.generations')):has(.badge.completed)")
    assert image_row.locator("[data-input]").text_content() == IMAGE_PROMPT
    assert page.locator("img[src='x'], main script").count() == 0
    shot(page, "07-history")
    image_row.locator("a").click()
    assert page.text_content("[data-detail-input]") == IMAGE_PROMPT
    page.wait_for_function("() => document.querySelector('[data-artifact=image] img')?.complete")
    assert page.evaluate("document.querySelector('[data-artifact=image] img').naturalWidth") == 64
    page.go_back()
    page.click("tr[data-request]:has(td:text('chat.completions')):has(.badge.completed) a")
    page.wait_for_selector("audio[data-replay]")
    replay = page.locator("audio[data-replay]").element_handle()
    assert page.evaluate(DECODED_DURATION, replay) > 0
    assert page.evaluate(PLAYS, replay)["currentTime"] > 0
    shot(page, "08-history-detail")


def keys(page, base: str) -> None:
    page.goto(f"{base}/keys/")
    page.fill("#key-name", "browser-key")
    page.click("form button:text('Create key')")
    secret = page.text_content("[data-secret]")
    assert secret.startswith("omni-")
    shot(page, "09-key-created")
    page.accept_dialogs = True  # the page asks before it revokes
    page.click("tr[data-key='browser-key'] button:text('Revoke')")
    page.wait_for_selector("tr[data-key='browser-key'] .badge:text('revoked')")
    page.accept_dialogs = False
    assert page.dialogs.pop().startswith("Revoke the key “browser-key”?")
    assert secret not in page.content()
    shot(page, "10-key-revoked")


def speak(page, base: str) -> None:
    page.goto(f"{base}/playground/speech/?deployment=omni")
    page.fill("#input", "welcome to the console")
    page.select_option("#response_format", "pcm16")
    page.click("#speech-form button[type=submit]")
    page.wait_for_selector("[data-speech-audio]", timeout=240_000)
    assert page.get_attribute("#speech-result a[download]", "download").endswith(".pcm")
    shot(page, "11-speech")


def dashboard_agrees_with_the_history(live, stack) -> None:
    """The dashboard tab opened at the start shows, without a reload, numbers that match the
    requests made (it refreshes every 2 s: wait for a refresh that came after the last one ended)."""
    stack.history_written()
    for name, made in (("omni", 2), ("img", 1)):  # omni: the chat and the speech; img: the image
        rows = list(InferenceRequest.objects.filter(deployment_name=name))
        assert len(rows) == made and all(row.finished_at is not None for row in rows)
        deadline = time.monotonic() + 60
        while True:
            try:
                numbers_match(live, name, rows)
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    print(stack.logs())
                    raise
                time.sleep(0.5)


def numbers_match(live, name: str, rows: list) -> None:
    recent_before = _made_since(rows, minutes=5)
    numbers = dashboard_numbers(live.content(), name)
    recent_after = _made_since(rows, minutes=5)
    assert numbers.last_hour == len(rows) and sum(numbers.bars) == len(rows) and numbers.queue_depth == 0
    assert numbers.requests_per_min in {round(recent_before / 5, 2), round(recent_after / 5, 2)}
    completed = [row for row in rows if row.status == "completed"]
    for route in {row.route for row in completed}:
        for timing in ("ttft", "ttfp", "e2el"):
            values = [getattr(r, f"{timing}_s") for r in completed if r.route == route and getattr(r, f"{timing}_s")
                      is not None]  # fmt: skip
            shown = [numbers.latency.get((route, timing.upper(), p)) for p in (50, 90, 99)]  # None: not shown
            if not values:
                assert shown == [None, None, None], (name, route, timing, shown)
                continue
            assert None not in shown, (name, route, timing, shown)  # not refreshed yet
            # the page rounds to 3 decimals; each percentile is one of the requests' values, p99 the largest
            assert all(any(abs(value - seen) <= 0.0006 for value in values) for seen in shown), (name, timing, shown)
            assert shown == sorted(shown) and abs(shown[2] - max(values)) <= 0.0006, (name, timing, shown, values)
    if name == "omni":  # the chat wrote text and spoke
        assert all(numbers.latency[("chat.completions", t, 50)] is not None for t in ("TTFT", "TTFP", "E2EL"))


def _made_since(rows, minutes: int) -> int:
    since = timezone.now() - timedelta(minutes=minutes)
    return sum(1 for row in rows if row.created_at >= since)


@pytest.mark.timeout(1500)
def test_deploy_try_and_find_it_in_the_history(console_stack, root, tiny_models, browser_page):
    page, base = browser_page, console_stack.base
    sign_in(page, base)
    shot(page, "02-dashboard")
    live = watched(page.context.new_page())  # stays on the dashboard: it must update itself
    live.goto(f"{base}/")
    page.bring_to_front()
    page.goto(f"{base}/catalog/")
    shot(page, "03-catalog")
    deploy(page, base, "text_to_image", "img", str(tiny_models["sd3"]))
    deploy(page, base, "qwen2_5_omni", "omni", str(tiny_models["qwen2_5_omni"]), sampling=OMNI_SAMPLING)
    logs_arrive_live(page, console_stack)
    wait_running(page, console_stack)
    shot(page, "04-deployment")
    chat(page, base)
    page.goto(f"{base}/deployments/img/")
    wait_running(page, console_stack)
    generate_image(page, base)
    errors_are_text(page, base)
    history_replay(page, base)
    keys(page, base)
    speak(page, base)
    page.goto(f"{base}/usage/")
    shot(page, "12-usage")
    live.bring_to_front()
    dashboard_agrees_with_the_history(live, console_stack)
    live.wait_for_selector("[data-deployment='omni'] [data-state]:text('RUNNING')")
    shot(live, "02-dashboard-live")
    assert page.errors == [] and live.errors == []  # no script error on any page
    assert page.dialogs == [] and live.dialogs == []  # no script of a prompt or an error message ran


def video_job(page, prompt: str, steps: int) -> None:
    page.fill("#prompt", prompt)
    page.select_option("#size", "64x64")
    page.fill("#num_frames", "5")
    page.fill("#num_inference_steps", str(steps))
    page.fill("#seed", "3")
    page.click("#video-form button[type=submit]")


def cancel_a_running_job(page) -> None:
    video_job(page, "a long clip", steps=200)
    job = page.locator("[data-job]").first
    job.locator(".badge.running").wait_for(timeout=60_000)
    page.wait_for_function("() => parseFloat(document.querySelector('[data-job] .progress > span').style.width) > 0",
                           timeout=120_000)  # fmt: skip
    job.locator("button:text('Cancel')").click()
    job.locator(".badge:text('cancelled')").wait_for()
    assert job.locator("video").count() == 0 and job.locator("button:text('Cancel')").count() == 0


@pytest.mark.timeout(900)
def test_video_jobs_queue_show_progress_and_play(console_stack, root, tiny_video_model, browser_page):
    page, base = browser_page, console_stack.base
    deployment_create(name="clip", pipeline=Pipeline.objects.get(name="text_to_video"),
                      model_dir=str(tiny_video_model), deploy_config={})  # fmt: skip
    sign_in(page, base)
    page.goto(f"{base}/deployments/clip/")
    wait_running(page, console_stack)
    page.goto(f"{base}/playground/video/?deployment=clip")
    page.evaluate(WATCH_BARS, "[data-job] .progress > span")
    video_job(page, "waves <b>rolling</b>", steps=8)
    video_job(page, "a second clip", steps=4)
    rows = page.locator("[data-job]")
    wait_for(lambda: rows.count() == 2, timeout=10, what="two jobs in the queue")
    try:
        page.wait_for_function("() => document.querySelectorAll('[data-job] .badge.completed').length === 2",
                               timeout=300_000)  # fmt: skip
    except Exception:
        print(page.text_content("#jobs"), console_stack.logs())
        raise
    widths = page.evaluate("window.barWidths")
    for index in range(2):
        row = rows.nth(index)
        ref = row.get_attribute("data-ref")
        moving = [step["width"] for step in widths[ref] if 0 < step["width"] < 100]
        assert moving and moving == sorted(moving) and widths[ref][-1]["width"] == 100, widths[ref]
        playback = page.evaluate(PLAYS, row.locator("video").element_handle())
        assert playback["duration"] > 0 and playback["currentTime"] > 0 and playback["width"] == 64
        assert row.locator("a[data-history-link]").count() == 1
    first_queued = rows.nth(1)  # the queue shows the newest job first
    assert first_queued.text_content().startswith("waves <b>rolling</b>") and page.locator("#jobs b").count() == 0
    assert len([s for s in widths[first_queued.get_attribute("data-ref")] if 0 < s["width"] < 100]) >= 2
    shot(page, "15-video")
    cancel_a_running_job(page)
    console_stack.history_written()
    assert InferenceRequest.objects.filter(route="videos", status="completed").count() == 2
    wait_for(lambda: InferenceRequest.objects.filter(route="videos", status="cancelled").count() == 1,
             timeout=30, what="the stopped job recorded as cancelled")  # fmt: skip
    assert page.errors == [] and page.dialogs == []
