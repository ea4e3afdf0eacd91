"""The console in a real browser (Debian's Chromium through Playwright) against a live platform:
sign in, deploy, wait for RUNNING, chat with streamed text and audio, generate an image with a
moving progress bar, find both in the history and replay the audio, create and revoke a key.
Screenshots of every page go to test-artifacts/console/."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from django.conf import settings
from procs import PYTHON, REPO

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]  # fmt: skip
SHOTS = REPO / "test-artifacts" / "console"
PASSWORD = "correct horse battery"

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="session")
def tiny_image_model() -> Path:
    """The tiny SD3 checkpoint under the models dir (built once; `make run` shares it)."""
    root = Path(settings.MODELS_DIR)
    subprocess.run([PYTHON, "-m", "stages.tiny", str(root), "--only", "sd3"], cwd=REPO, check=True)
    return root / "sd3"


@pytest.fixture(scope="session")
def tiny_omni_model() -> Path:
    root = Path(settings.MODELS_DIR)
    subprocess.run([PYTHON, "-m", "stages.tiny", str(root), "--only", "qwen2_5_omni"], cwd=REPO, check=True)
    return root / "qwen2_5_omni"


@pytest.fixture
def browser_page(monkeypatch):
    if not CHROMIUM.exists():
        pytest.skip("Debian's Chromium is not installed at /usr/bin/chromium (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = browser.new_page(viewport={"width": 1360, "height": 880})
        page.set_default_timeout(30_000)
        page.errors = []
        page.on("pageerror", lambda error: page.errors.append(str(error)))
        yield page
        browser.close()


def shot(page, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def sign_in(page, base: str) -> None:
    page.goto(f"{base}/")
    assert "/login/" in page.url
    shot(page, "01-login")
    page.fill("#id_username", "root")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("h1:text('Dashboard')")


def deploy(page, base: str, pipeline: str, name: str, model_dir: str, options: dict[str, str], sampling=None) -> None:
    page.goto(f"{base}/catalog/{pipeline}/deploy/")
    page.fill("[name=name]", name)
    page.fill("[name=model_dir]", model_dir)
    for knob, values in (("options", options), ("sampling", sampling or {})):
        for stage, value in values.items():
            section = page.locator(f"[data-stage-section='{stage}']")
            if not section.locator(f"[name='stages.{stage}.{knob}']").is_visible():
                page.click(f"[data-stage-section='{stage}'] summary")
            page.fill(f"[name='stages.{stage}.{knob}']", value)
    if pipeline == "echo-voice":  # first show that a bad value is reported on its field
        page.fill("[name='stages.voice.replicas']", "0")
        page.click("form button[type=submit]:text('Deploy')")
        error = page.text_content("[data-field='stages.voice.replicas'] .errorlist")
        assert error == "must be at least 1"
        shot(page, "03b-deploy-error")
        page.fill("[name='stages.voice.replicas']", "1")
    page.click("form button[type=submit]:text('Deploy')")
    page.wait_for_url(f"{base}/deployments/{name}/")


def wait_running(page, stack, timeout_s: float = 120) -> None:
    try:
        page.wait_for_selector("[data-deployment-state]:text('RUNNING')", timeout=timeout_s * 1000)
    except Exception:
        print(stack.logs())
        raise


def chat(page, base: str) -> None:
    page.goto(f"{base}/playground/chat/?deployment=voice")
    page.evaluate("""() => {
        window.textUpdates = 0;
        new MutationObserver(() => { window.textUpdates++; })
            .observe(document.getElementById('chat-log'), {subtree: true, characterData: true, childList: true});
    }""")
    prompt = "hello big wide world, streamed to a browser"
    page.fill("#prompt", prompt)
    page.click("#chat-form button[type=submit]")
    page.wait_for_selector("[data-reply-audio]", timeout=60_000)
    assert page.text_content("[data-reply] [data-text]") == prompt
    assert page.evaluate("window.textUpdates") >= 5  # the text arrived piece by piece
    audio = page.evaluate("window.omniAudio")
    assert audio["chunks"] >= 5 and audio["samples"] > 0 and audio["sampleRate"] == 16000
    duration = page.evaluate("""() => new Promise((resolve) => {
        const audio = document.querySelector('[data-reply-audio]');
        if (audio.readyState >= 1) resolve(audio.duration);
        audio.addEventListener('loadedmetadata', () => resolve(audio.duration));
    })""")
    assert duration == pytest.approx(audio["samples"] / 16000, rel=0.01)
    page.click("#view-code summary")
    assert "/v1/chat/completions" in page.text_content("[data-code='curl']")
    shot(page, "05-chat")


def generate_image(page, base: str) -> None:
    page.goto(f"{base}/playground/image/?deployment=img")
    page.fill("#prompt", "a <b>bold</b> lighthouse")
    page.fill("#num_inference_steps", "6")
    page.fill("#seed", "7")
    page.click("#image-form button[type=submit]")
    page.wait_for_selector("figure[data-image] img", timeout=90_000)
    progress = page.evaluate("window.omniProgress")
    assert len(progress) >= 3 and progress == sorted(progress) and progress[0] < 1
    assert page.evaluate("document.querySelector('figure[data-image] img').naturalWidth") == 64
    assert page.text_content("figure[data-image] figcaption").startswith("a <b>bold</b> lighthouse")  # as text
    page.wait_for_selector("#image-status a[data-history-link]")
    shot(page, "06-image")


def speak(page, base: str) -> None:
    page.goto(f"{base}/playground/speech/?deployment=voice")
    page.fill("#input", "welcome to the console")
    page.select_option("#response_format", "pcm16")
    page.click("#speech-form button[type=submit]")
    page.wait_for_selector("[data-speech-audio]")
    assert page.get_attribute("#speech-result a[download]", "download").endswith(".pcm")
    shot(page, "11-speech")


def history_replay(page, base: str) -> None:
    page.goto(f"{base}/history/")
    assert page.locator("tr[data-request]").count() == 2  # the chat and the image (the speech comes later)
    assert page.locator("td:text('images.generations')").count() == 1
    shot(page, "07-history")
    page.click("tr[data-request]:has(td:text('chat.completions')) a")
    page.wait_for_selector("audio[data-replay]")
    played = page.evaluate("""() => new Promise((resolve, reject) => {
        const audio = document.querySelector('audio[data-replay]');
        audio.addEventListener('timeupdate', () => { if (audio.currentTime > 0) resolve(audio.currentTime); });
        audio.addEventListener('error', () => reject(new Error('audio failed to load')));
        audio.play().catch(reject);
    })""")
    assert played > 0
    shot(page, "08-history-detail")


def keys(page, base: str) -> None:
    page.goto(f"{base}/keys/")
    page.fill("#key-name", "browser-key")
    page.click("form button:text('Create key')")
    secret = page.text_content("[data-secret]")
    assert secret.startswith("omni-")
    shot(page, "09-key-created")
    page.click("tr[data-key='browser-key'] button:text('Revoke')")
    page.wait_for_selector("tr[data-key='browser-key'] .badge:text('revoked')")
    assert secret not in page.content()
    shot(page, "10-key-revoked")


def test_deploy_try_and_find_it_in_the_history(console_stack, root, tiny_image_model, browser_page):
    page, base = browser_page, console_stack.base
    sign_in(page, base)
    shot(page, "02-dashboard")
    page.goto(f"{base}/catalog/")
    shot(page, "03-catalog")
    deploy(page, base, "echo-voice", "voice", "-", {"echo": '{"delay_s": 0.04}'})
    deploy(page, base, "text_to_image", "img", str(tiny_image_model), {})
    page.goto(f"{base}/deployments/voice/")
    wait_running(page, console_stack)
    shot(page, "04-deployment")
    chat(page, base)
    page.goto(f"{base}/deployments/img/")
    wait_running(page, console_stack)
    generate_image(page, base)
    history_replay(page, base)
    keys(page, base)
    speak(page, base)
    page.goto(f"{base}/playground/video/")
    shot(page, "11-video")
    page.goto(f"{base}/usage/")
    shot(page, "12-usage")
    page.goto(f"{base}/")
    page.wait_for_selector("[data-deployment='voice'] [data-state]:text('RUNNING')")
    shot(page, "02-dashboard-live")
    assert page.errors == []  # no script error on any page


def test_the_tiny_omni_model_answers_with_text_and_audio(console_stack, root, tiny_omni_model, browser_page):
    page, base = browser_page, console_stack.base
    sign_in(page, base)
    # the random tiny talker never samples end-of-speech: cap its codes like the make-run demo does
    deploy(page, base, "qwen2_5_omni", "omni", str(tiny_omni_model), {}, sampling={"talker": '{"max_tokens": 40}'})
    wait_running(page, console_stack, timeout_s=300)
    shot(page, "20-omni-deployment")
    page.goto(f"{base}/playground/chat/?deployment=omni")
    page.fill("#prompt", "Hello, who are you?")
    page.fill("#max_tokens", "12")
    page.click("#chat-form button[type=submit]")
    page.wait_for_selector("[data-reply-audio]", timeout=240_000)
    assert page.text_content("[data-reply] [data-text]")
    audio = page.evaluate("window.omniAudio")
    assert audio["samples"] > 0 and audio["sampleRate"] == 24000
    shot(page, "21-omni-chat")
