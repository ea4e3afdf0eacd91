"""A new user's whole walk through the console, in one go, in a real browser (Debian's Chromium
through Playwright) on a live platform with real replica hosts and the tiny checkpoints.

A fresh account that is not staff signs in, deploys the tiny Qwen2.5-Omni from the catalog with
the form's defaults, waits for it, chats and hears the answer, holds ten spoken turns in the voice
playground (each answered with audio), deploys the image and the video families and makes an image
and a video, finds those requests in the history, creates an API key and uses it with the openai
SDK, revokes it and sees it refused, then scales a deployment to 2 replicas and back, stops it and
deletes it. After every step no error is shown (no error message, no error page, no server error,
no script error or console error) and a screenshot goes to test-artifacts/console/walk/.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import openai
import pytest
from console_browser import SHOTS, chromium_page
from django.conf import settings
from page_probes import PLAYS
from procs import PYTHON, REPO
from walk_microphone import FAKE_MICROPHONE, spoken_utterance

from control_plane.deployments.models import Deployment
from control_plane.inference.models import InferenceRequest

PASSWORD = "a new user's passphrase"
WALK_SHOTS = SHOTS / "walk"
OMNI, IMAGE, VIDEO = "qwen2-5-omni", "text-to-image", "text-to-video"  # the deploy form's default names
VOICE_TURNS = 10
# The random tiny thinker never stops by itself, and on a small shared CPU machine the tiny talker
# speaks slower than real time (a request whose audio falls max_realtime_lag_s behind fails). So
# the omni deploy changes two of the form's defaults, as a user trying it out would: its thinker
# writes at most 16 tokens a reply (voice turns included) and a reply speaks at most 1 s.
OMNI_FORM = {"stages.thinker.sampling": '{"max_tokens": 16}', "max_audio_seconds": "1"}
CHAT_TOKENS = 16
SHOWN_ERRORS = ("[data-error-page], .messages li.error, main .errorlist, main .field-error:not(:empty), "
                "[data-reply].error, [data-job] .badge.failed")  # fmt: skip

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="session")
def walk_checkpoints() -> Path:
    """The tiny checkpoints the deploy form's defaults name, under the models dir (built once)."""
    root = Path(settings.MODELS_DIR)
    subprocess.run([PYTHON, "-m", "stages.tiny", str(root), "--only", "qwen2_5_omni", "sd3", "wan"],
                   cwd=REPO, check=True, capture_output=True)  # fmt: skip
    return root


@pytest.fixture
def newcomer(db, django_user_model):
    return django_user_model.objects.create_user("newcomer", password=PASSWORD)


class Walk:
    """The page a user walks through, what went wrong on it so far, and the live platform."""

    def __init__(self, page, stack):
        self.page, self.stack, self.base = page, stack, stack.base
        self.steps = 0
        self.last_step_at = time.monotonic()
        self.console_errors: list[str] = []
        self.server_errors: list[str] = []
        page.on("console", lambda message: message.type == "error" and self.console_errors.append(message.text))
        page.on("response", lambda response: response.status >= 500 and self.server_errors.append(
            f"{response.status} {response.request.method} {response.url}"))  # fmt: skip

    def go(self, path: str) -> None:
        self.page.goto(f"{self.base}{path}")

    def nav(self, key: str) -> None:
        self.page.click(f"nav [data-nav='{key}']")
        self.page.wait_for_load_state()

    def step_done(self, name: str) -> None:
        """A screenshot of the step, and nothing wrong shown or reported on the way."""
        self.steps += 1
        print(f"walk step {self.steps:02d} {name}: {time.monotonic() - self.last_step_at:.1f} s", flush=True)
        self.last_step_at = time.monotonic()
        self.page.screenshot(path=str(WALK_SHOTS / f"{self.steps:02d}-{name}.png"), full_page=True)
        shown = self.page.locator(SHOWN_ERRORS)
        assert shown.count() == 0, f"{name}: an error is shown: {shown.all_text_contents()}"
        assert self.page.errors == [], f"{name}: script errors {self.page.errors}"
        assert self.console_errors == [], f"{name}: console errors {self.console_errors}"
        assert self.server_errors == [], f"{name}: server errors {self.server_errors}"
        assert self.page.dialogs == [], f"{name}: unexpected dialogs {self.page.dialogs}"

    def failed(self) -> None:
        """What the page showed and the platform logged when a step failed."""
        self.page.screenshot(path=str(WALK_SHOTS / f"{self.steps + 1:02d}-failed.png"), full_page=True)
        print(f"failed after step {self.steps} at {self.page.url}:\n{self.page.text_content('main')}")
        print(self.stack.logs())

    def wait_state(self, state: str, timeout_s: float = 600) -> None:
        try:
            self.page.wait_for_selector(f"[data-deployment-state]:text('{state}')", timeout=timeout_s * 1000)
        except Exception:
            print(self.stack.logs())
            raise


@pytest.fixture
def walk(console_stack, monkeypatch, tmp_path, walk_checkpoints, newcomer):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop
    WALK_SHOTS.mkdir(parents=True, exist_ok=True)
    for old in WALK_SHOTS.glob("*.png"):
        old.unlink()
    with chromium_page(["--autoplay-policy=no-user-gesture-required"]) as page:
        page.context.add_init_script(FAKE_MICROPHONE)
        page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=console_stack.base)
        yield Walk(page, console_stack)


# ---------------------------------------------------------------------- the steps


def sign_in(walk: Walk) -> None:
    page = walk.page
    walk.go("/")
    assert "/login/" in page.url
    page.fill("#id_username", "newcomer")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("h1:text('Dashboard')")
    assert "Signed in as newcomer" in page.text_content(".who") and "admin" not in page.text_content(".who")
    walk.step_done("signed-in")


def deploy_from_the_catalog(walk: Walk, pipeline: str, name: str, changes: dict[str, str] | None = None) -> None:
    """Catalog -> the pipeline's Deploy -> the form as it opens (but for `changes`) -> the deployment's page."""
    page = walk.page
    walk.nav("catalog")
    page.click(f"[data-pipeline='{pipeline}'] a:text('Deploy')")
    page.wait_for_selector(f"h1:text('Deploy {pipeline}')")
    assert page.input_value("[name=name]") == name
    for field, value in (changes or {}).items():
        stage = field.split(".")[1] if field.startswith("stages.") else None
        if stage and not page.locator(f"[name='{field}']").is_visible():
            page.click(f"[data-stage-section='{stage}'] summary")  # the engine knobs fold away
        page.fill(f"[name='{field}']", value)
    page.click("form button[type=submit]:text('Deploy')")
    page.wait_for_url(f"{walk.base}/deployments/{name}/")
    assert Deployment.objects.get(name=name).created_by.username == "newcomer"
    walk.step_done(f"deployed-{name}")
    walk.wait_state("RUNNING")
    walk.step_done(f"running-{name}")


def chat_with_audio(walk: Walk) -> None:
    page = walk.page
    page.click("a:text('Try it')")  # on the omni deployment's page
    page.wait_for_selector("h1:text('Chat')")
    assert page.input_value("#deployment") == OMNI
    page.fill("#prompt", "Hello! Who are you?")
    page.fill("#max_tokens", str(CHAT_TOKENS))
    page.click("#chat-form button[type=submit]")
    page.wait_for_selector("[data-reply-audio], [data-reply].error", timeout=300_000)
    assert page.locator("[data-reply].error").count() == 0, page.text_content("[data-reply]")
    assert page.text_content("[data-reply] [data-text]")
    playback = page.evaluate(PLAYS, page.locator("[data-reply-audio]").element_handle())
    assert playback["duration"] > 0 and playback["currentTime"] > 0
    walk.step_done("chat-audio")


def voice_turns(walk: Walk, utterance: list[float]) -> None:
    """VOICE_TURNS spoken turns through /v1/realtime; each is spoken once the previous answer is in."""
    page = walk.page
    walk.nav("voice")
    assert page.input_value("#deployment") == OMNI
    page.click("#voice-start")
    page.wait_for_selector("#voice-status[data-voice-state='listening']")
    page.evaluate("(samples) => window.walkSetUtterance(samples)", utterance)
    for turn in range(1, VOICE_TURNS + 1):
        heard_before = stat(page, "audioSamples")
        page.evaluate("() => window.walkSpeak()")
        try:
            page.wait_for_function(
                f"""() => Number(document.getElementById('voice-stats').dataset.turns) >= {turn}
                                       || document.getElementById('voice-error').textContent""",
                timeout=300_000,
            )
        except Exception:
            print(page.text_content("#voice-status"), page.text_content("#voice-error"))
            print(page.text_content("#voice-log"))
            print(walk.stack.logs())
            raise
        assert stat(page, "audioSamples") > heard_before, f"turn {turn} got no audio"
        assert page.text_content("#voice-error") == ""
    replies = page.locator("[data-reply]")
    assert replies.count() == VOICE_TURNS and page.locator("[data-user-turn]").count() == VOICE_TURNS
    assert all(meta.startswith("completed") for meta in page.locator("[data-reply] .meta").all_text_contents())
    walk.step_done("voice-turns")
    page.click("#voice-stop")
    page.wait_for_selector("#voice-status[data-voice-state='idle']")
    walk.step_done("voice-stopped")


def stat(page, name: str) -> int:
    return int(page.eval_on_selector("#voice-stats", f"node => node.dataset.{name}"))


def generate_an_image(walk: Walk) -> None:
    page = walk.page
    walk.nav("image")
    page.select_option("#deployment", IMAGE)
    page.fill("#prompt", "a lighthouse at dawn")
    page.click("#image-form button[type=submit]")
    page.wait_for_selector("figure[data-image] img, #image-form .field-error:not(:empty)", timeout=300_000)
    assert page.locator("#image-form .field-error:not(:empty)").count() == 0, page.text_content("#image-form")
    page.wait_for_function("() => document.querySelector('figure[data-image] img').complete")
    assert page.evaluate("document.querySelector('figure[data-image] img').naturalWidth") > 0
    walk.step_done("image")


def make_a_video(walk: Walk) -> None:
    page = walk.page
    walk.nav("video")
    page.select_option("#deployment", VIDEO)
    page.fill("#prompt", "waves rolling on a beach")
    page.click("#video-form button[type=submit]")
    job = page.locator("[data-job]").first
    try:
        job.locator(".badge.completed, .badge.failed").wait_for(timeout=300_000)
    except Exception:
        print(page.text_content("#jobs"), walk.stack.logs())
        raise
    playback = page.evaluate(PLAYS, job.locator("video").element_handle())
    assert playback["duration"] > 0 and playback["currentTime"] > 0
    walk.step_done("video")


def find_them_in_the_history(walk: Walk) -> None:
    page = walk.page
    walk.stack.history_written()
    walk.nav("history")
    routes = page.locator("tr[data-request] td:nth-child(4)").all_text_contents()
    assert sorted(set(routes)) == ["chat.completions", "images.generations", "realtime", "videos"], routes
    assert routes.count("realtime") == VOICE_TURNS and len(routes) == VOICE_TURNS + 3
    assert page.locator("tr[data-request] .badge.completed").count() == len(routes)
    walk.step_done("history")
    page.click("tr[data-request]:has(td:text('chat.completions')) a")
    page.wait_for_selector("audio[data-replay]")
    assert page.text_content("[data-detail-input]") == "Hello! Who are you?"
    walk.step_done("history-detail")


def an_api_key_for_the_sdk(walk: Walk) -> None:
    page = walk.page
    walk.nav("keys")
    page.fill("#key-name", "walk-key")
    page.click("form button:text('Create key')")
    page.click("button[data-copy='new-secret']")
    page.wait_for_selector("[data-copy-status]:text('Copied to the clipboard.')")
    secret = page.evaluate("navigator.clipboard.readText()")
    assert secret == page.text_content("[data-secret]").strip() and secret.startswith("omni-")
    walk.step_done("key-created")

    client = openai.OpenAI(base_url=f"{walk.base}/v1", api_key=secret, max_retries=0, timeout=300)
    answer = client.chat.completions.create(model=OMNI, messages=[{"role": "user", "content": "Hi there"}],
                                            max_tokens=8, modalities=["text"])  # fmt: skip
    assert answer.choices[0].message.content and answer.model == OMNI

    page.accept_dialogs = True  # the page asks before it revokes
    page.click("tr[data-key='walk-key'] button:text('Revoke')")
    page.wait_for_selector("tr[data-key='walk-key'] .badge:text('revoked')")
    page.accept_dialogs = False
    assert page.dialogs.pop().startswith("Revoke the key “walk-key”?")
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model=OMNI, messages=[{"role": "user", "content": "Hi again"}], max_tokens=8)
    walk.step_done("key-revoked")


def scale_to(walk: Walk, name: str, stage: str, replicas: int) -> None:
    page = walk.page
    page.select_option("#scale-stage", stage)
    page.fill("#scale-replicas", str(replicas))
    page.click("#scale-form button[type=submit]")
    page.wait_for_url(f"{walk.base}/deployments/{name}/")
    try:  # the notice shows while the change is on its way and goes once it has landed
        page.wait_for_selector(f"[data-scaling='{stage}']", state="detached", timeout=600_000)
    except Exception:
        print(walk.stack.logs())
        raise
    running = page.locator(f"tr[data-replica^='{stage}-'] .badge.RUNNING")
    assert running.count() == replicas


def scale_stop_and_delete(walk: Walk) -> None:
    page = walk.page
    walk.nav("deployments")
    page.click(f"[data-deployment-row='{IMAGE}'] a")
    page.wait_for_selector(f"h1:text('{IMAGE}')")
    scale_to(walk, IMAGE, "dit", 2)
    walk.step_done("scaled-to-2")
    scale_to(walk, IMAGE, "dit", 1)
    walk.step_done("scaled-to-1")

    page.click("form[action$='/stop/'] button")
    walk.wait_state("STOPPED", timeout_s=120)
    assert Deployment.objects.get(name=IMAGE).desired_state == "STOPPED"
    walk.step_done("stopped")

    page.accept_dialogs = True  # the page asks before it deletes
    page.click("form[action$='/delete/'] button")
    page.wait_for_selector("h1:text('Dashboard')")
    page.accept_dialogs = False
    assert page.dialogs.pop() == f"Delete {IMAGE}? Its replicas stop."
    assert f"Deleted {IMAGE}." in page.text_content(".messages")
    assert not Deployment.objects.filter(name=IMAGE).exists()
    walk.step_done("deleted")


@pytest.mark.timeout(2400)
def test_a_new_users_walk_through_the_console(walk, tmp_path):
    utterance = spoken_utterance("hello, how are you today", tmp_path)
    try:
        sign_in(walk)
        deploy_from_the_catalog(walk, "qwen2_5_omni", OMNI, OMNI_FORM)
        chat_with_audio(walk)
        voice_turns(walk, utterance)
        deploy_from_the_catalog(walk, "text_to_image", IMAGE)
        generate_an_image(walk)
        deploy_from_the_catalog(walk, "text_to_video", VIDEO)
        make_a_video(walk)
        find_them_in_the_history(walk)
        an_api_key_for_the_sdk(walk)
        scale_stop_and_delete(walk)
    except Exception:
        walk.failed()
        raise
    rows = InferenceRequest.objects.filter(user__username="newcomer")
    assert rows.filter(route="chat.completions", status="completed").count() == 2  # the playground's and the SDK's
