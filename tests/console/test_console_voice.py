"""The console's voice playground: the page lists only deployments that answer with audio, and
in a real browser (Debian's Chromium through Playwright, a fake microphone fed from a WAV that
espeak-ng spoke) a spoken turn goes through /v1/realtime and its answer plays; speaking over
the next answer stops it and truncates it to what was heard."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile
from console_browser import chromium_page, shot, unavailable
from console_stack import wait_running

from control_plane.deployments.models import Deployment, Pipeline
from control_plane.deployments.services import deployment_create
from control_plane.inference.models import InferenceRequest
from stages.resampling import resample

PASSWORD = "correct horse battery"
CAPTURE_RATE = 48000
# The voice stage answers '[user audio 1.36 s]' as 4 tones of 10 ms, 0.5 s apart: a response takes
# 1.5 to 2 s. Server VAD ends a turn after 0.5 s of silence, so after the first utterance's long
# pause the answer completes; after the second's short one (and the file's 0.5 s lead-in, as
# Chromium loops it) the user speaks again while the answer runs: a barge-in.
VOICE = {"stages": {"echo": {"options": {"delay_s": 0.01}}, "voice": {"options": {"delay_s": 0.5}}}}
LONG_PAUSE_S, SHORT_PAUSE_S = 4.0, 0.6


def running(name: str, pipeline: str) -> Deployment:
    deployment = deployment_create(name=name, pipeline=Pipeline.objects.get(name=pipeline), model_dir="-",
                                   deploy_config={})  # fmt: skip
    Deployment.objects.filter(pk=deployment.pk).update(state="RUNNING")
    return deployment


@pytest.mark.django_db
def test_the_voice_page_offers_only_deployments_that_speak(alice_client, pipelines):
    running("talks", "echo-voice")
    running("writes", "echo")
    page = alice_client.get("/playground/voice/").content.decode()
    assert 'data-nav="voice"' in page and 'class="active" data-nav="voice"' in page
    assert '<option value="talks">' in page and '<option value="writes">' not in page
    assert "console/js/voice.js" in page
    Deployment.objects.filter(name="talks").update(state="STOPPED")
    page = alice_client.get("/playground/voice/").content.decode()
    assert "No running deployment answers with audio" in page and 'id="voice-start" disabled' in page


def test_the_voice_page_needs_a_signed_in_user(client):
    response = client.get("/playground/voice/")
    assert response.status_code == 302 and "/login/" in response["Location"]


# ---------------------------------------------------------------------- in a browser


@pytest.fixture
def spoken_turn_wav(tmp_path) -> Path:
    """'hello, how are you' twice, a long then a short pause after each, as 16-bit mono PCM at 48 kHz
    (Chromium loops the file)."""
    if shutil.which("espeak-ng") is None:
        unavailable("espeak-ng is not installed (apt-get install -y espeak-ng)")
    spoken = tmp_path / "espeak.wav"
    subprocess.run(["espeak-ng", "-w", str(spoken), "hello, how are you"], check=True, capture_output=True)
    samples, rate = soundfile.read(spoken, dtype="float32")
    speech = resample(samples if samples.ndim == 1 else samples.mean(axis=1), rate, CAPTURE_RATE)

    def pause(seconds: float) -> np.ndarray:
        return np.zeros(int(CAPTURE_RATE * seconds), dtype=np.float32)

    path = tmp_path / "microphone.wav"
    audio = np.concatenate([pause(0.5), speech, pause(LONG_PAUSE_S), speech, pause(SHORT_PAUSE_S)])
    soundfile.write(path, audio, CAPTURE_RATE, subtype="PCM_16")
    return path


@pytest.fixture
def voice_page(monkeypatch, spoken_turn_wav):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop
    fake_microphone = ["--autoplay-policy=no-user-gesture-required", "--use-fake-ui-for-media-stream",
                       "--use-fake-device-for-media-stream", f"--use-file-for-fake-audio-capture={spoken_turn_wav}"]  # fmt: skip
    with chromium_page(fake_microphone) as page:
        yield page


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_spoken_turn_and_a_barge_in_in_the_voice_playground(console_stack, root, voice_page):
    page, base = voice_page, console_stack.base
    deployment_create(name="voice", pipeline=Pipeline.objects.get(name="echo-voice"), model_dir="-",
                      deploy_config=VOICE)  # fmt: skip
    page.goto(f"{base}/login/")
    page.fill("#id_username", "root")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("h1:text('Dashboard')")
    wait_running("voice", console_stack)

    page.click("[data-nav='voice']")
    page.wait_for_selector("h1:text('Voice')")
    assert page.input_value("#deployment") == "voice"
    page.click("#voice-start")
    wait_for_stat(page, console_stack, "turns", 1)
    stats = page.eval_on_selector("#voice-stats", "node => ({...node.dataset})")
    assert int(stats["micChunks"]) >= 10  # the microphone streamed (100 ms chunks)
    # 4 word pieces, each a 10 ms tone at 24 kHz (less a sample or two of resampling)
    assert int(stats["audioSamples"]) >= 4 * 240 - 4 and int(stats["audioChunks"]) >= 4
    answered = page.locator("[data-reply]:not(.interrupted)").first
    reply = answered.locator("[data-transcript]").text_content()
    assert reply.startswith("[user audio ") and reply.endswith(" s]")
    assert answered.locator(".meta").text_content().startswith("completed")
    assert page.locator("[data-user-turn]").count() >= 1
    # the player played it: Web Audio's clock went past the scheduled samples
    page.wait_for_function("() => Number(document.getElementById('voice-stats').dataset.playedMs) >= 30")

    wait_for_stat(page, console_stack, "interruptions", 1)  # conversation.item.truncated came back
    cut = page.locator(".msg.interrupted .meta").first.text_content()
    assert cut.startswith("cancelled") and "interrupted: heard" in cut
    assert page.text_content("#voice-error") == ""
    assert "s of audio" in page.text_content("#voice-sent")
    shot(page, "13-voice")

    page.click("#voice-stop")
    page.wait_for_selector("#voice-status[data-voice-state='idle']")
    assert page.is_enabled("#voice-start")
    console_stack.history_written()
    responses = InferenceRequest.objects.filter(route="realtime", deployment_name="voice")
    assert responses.filter(status="completed").exists()
    heard = [row.parameters.get("heard_audio_ms") for row in responses.filter(status="cancelled")]
    assert any(ms is not None and ms >= 0 for ms in heard)  # what the user heard is in the history
    assert page.errors == []


def wait_for_stat(page, stack, name: str, at_least: int, timeout_s: float = 40) -> None:
    """Until the page's counter `data-<name>` on #voice-stats reaches `at_least`."""
    try:
        page.wait_for_function(
            f"() => Number(document.getElementById('voice-stats').dataset.{name}) >= {at_least}",
            timeout=timeout_s * 1000,
        )
    except Exception:
        stats = page.eval_on_selector("#voice-stats", "node => ({...node.dataset})")
        print(page.text_content("#voice-status"), page.text_content("#voice-error"), stats, page.errors)
        print(page.text_content("#voice-log"))
        print(stack.logs())
        raise
