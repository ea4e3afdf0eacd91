"""The console's rough edges, in a real browser (Debian's Chromium through Playwright) against a
live platform with an `echo-voice` deployment (text and audio out, no model to load): the chat's
newest audio player stays in sight, the deployments list and the scale notice that goes once the
scale has landed, the catalog's search, the key page's copy button and revoke confirmation, the
voice playground's code following its form, and the styled 404 page. Screenshots go to
test-artifacts/console/."""

from __future__ import annotations

import os
import shutil
import subprocess
import wave

import numpy as np
import pytest
from console_browser import chromium_page, shot
from console_stack import wait_running
from procs import PYTHON

from control_plane.accounts.services import api_key_create
from control_plane.deployments.models import Pipeline
from control_plane.deployments.services import deployment_create

PASSWORD = "correct horse battery"
FAST = {"stages": {"echo": {"options": {"delay_s": 0.01}}, "voice": {"options": {"delay_s": 0.01}}}}
# the newest audio player, its box and the chat log's, and the window's height
PLAYER_PLACE = """() => {
  const players = document.querySelectorAll('[data-reply-audio]');
  const box = players[players.length - 1].getBoundingClientRect();
  const log = document.getElementById('chat-log').getBoundingClientRect();
  return {top: box.top, bottom: box.bottom, logTop: log.top, logBottom: log.bottom,
          window: window.innerHeight, players: players.length};
}"""

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def page(monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop
    with chromium_page(["--autoplay-policy=no-user-gesture-required"]) as page:
        page.context.grant_permissions(["clipboard-read", "clipboard-write"])
        yield page


def sign_in(page, base: str) -> None:
    page.goto(f"{base}/login/")
    page.fill("#id_username", "root")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("h1:text('Dashboard')")


def chat_keeps_the_newest_player_in_sight(page, base: str) -> None:
    page.goto(f"{base}/playground/chat/?deployment=talky")
    for turn in range(5):  # enough turns for the log to scroll
        page.fill("#prompt", f"turn {turn}: tell me something about the sea and the ships on it")
        page.click("#chat-form button[type=submit]")
        page.wait_for_function(f"() => document.querySelectorAll('[data-reply-audio]').length === {turn + 1}")
        page.wait_for_function("() => !document.querySelector('#chat-form button[type=submit]').disabled")
        page.wait_for_timeout(300)  # the player's metadata and layout settle
        place = page.evaluate(PLAYER_PLACE)
        assert place["logTop"] - 1 <= place["top"] and place["bottom"] <= place["logBottom"] + 1, place
        assert 0 <= place["top"] and place["bottom"] <= place["window"], place
    assert page.evaluate(
        "document.getElementById('chat-log').scrollHeight > document.getElementById('chat-log').clientHeight"
    )
    shot(page, "20-chat-newest-audio-in-sight")


def deployments_list_and_scale(page, base: str) -> None:
    page.click("[data-nav='deployments']")
    page.wait_for_selector("h1:text('Deployments')")
    row = page.locator("[data-deployment-row='talky']")
    assert row.locator("[data-state]").text_content() == "RUNNING"
    assert row.locator("[data-stage]").all_text_contents() == ["echo 1/1", "voice 1/1"]
    shot(page, "21-deployments")
    row.locator("a").click()
    page.wait_for_selector("#scale-form")
    assert page.input_value("#scale-replicas") == "1"
    page.select_option("#scale-stage", "voice")
    page.fill("#scale-replicas", "2")
    page.click("#scale-form button[type=submit]")
    notice = page.locator("[data-scaling='voice']")
    notice.wait_for()
    assert "Scaling voice to 2 replicas" in notice.text_content()
    shot(page, "22-scaling")
    notice.wait_for(state="detached", timeout=120_000)  # gone once the second replica runs
    assert page.locator("[data-replica='voice-1'] .badge").text_content() == "RUNNING"
    page.select_option("#scale-stage", "voice")
    assert page.input_value("#scale-replicas") == "2"  # the form starts from the current count
    page.select_option("#scale-stage", "echo")
    assert page.input_value("#scale-replicas") == "1"


def catalog_search(page, base: str) -> None:
    page.click("[data-nav='catalog']")
    names = page.locator("[data-pipeline]").evaluate_all("nodes => nodes.map(n => n.dataset.pipeline)")
    assert "qwen2_5_omni" in names and not [name for name in names if name.startswith("echo")]
    page.fill("#catalog-q", "omni")
    page.select_option("#catalog-modality", "audio")
    page.click("[data-catalog-search] button[type=submit]")
    page.wait_for_url("**/catalog/?q=omni&modality=audio")
    names = page.locator("[data-pipeline]").evaluate_all("nodes => nodes.map(n => n.dataset.pipeline)")
    assert sorted(names) == ["qwen2_5_omni", "qwen3_omni"]
    shot(page, "23-catalog-search")


def key_copy_and_revoke(page, base: str) -> None:
    page.click("[data-nav='keys']")
    page.fill("#key-name", "copied-key")
    page.fill("#key-deployments", "talky")
    page.click("form button:text('Create key')")
    secret = page.text_content("[data-secret]").strip()
    page.click("[data-copy='new-secret']")
    page.wait_for_selector("[data-copy='new-secret']:text('Copied')")
    assert page.evaluate("navigator.clipboard.readText()") == secret
    assert page.text_content("tr[data-key='copied-key'] [data-key-deployments]") == "talky"
    shot(page, "24-key-copied")
    revoke = "tr[data-key='copied-key'] button:text('Revoke')"
    page.click(revoke)  # dismissed: nothing happens
    assert page.dialogs.pop().startswith("Revoke the key “copied-key”?")
    page.wait_for_timeout(300)
    assert page.locator("tr[data-key='copied-key'] .badge").text_content() == "active"
    page.accept_dialogs = True
    page.click(revoke)
    page.wait_for_selector("tr[data-key='copied-key'] .badge:text('revoked')")
    page.accept_dialogs = False
    assert page.dialogs.pop().startswith("Revoke the key “copied-key”?")


def voice_code_follows_the_form(page, base: str) -> None:
    page.click("[data-nav='voice']")
    page.click("#voice-code summary")
    python = page.locator("#voice-code [data-code='python']")
    assert "client.realtime.connect(model='talky')" in python.text_content()
    assert "from openai import OpenAI" in python.text_content()
    page.select_option("#voice", "Ethan")
    page.fill("#instructions", "Answer in one word.")
    page.wait_for_function(
        "() => document.querySelector(\"#voice-code [data-code='python']\").textContent.includes('Answer in one word.')"
    )
    assert "'voice': 'Ethan'" in python.text_content()
    page.click("#voice-code [data-code-tab='javascript']")
    javascript = page.locator("#voice-code [data-code='javascript']")
    assert javascript.is_visible() and not python.is_visible()
    assert '"voice": "Ethan"' in javascript.text_content() and "new WebSocket(" in javascript.text_content()
    shot(page, "25-voice-code")


def the_shown_code_runs(page, root, tmp_path) -> None:
    """The voice page's Python (the openai SDK) and JavaScript (Node's WebSocket) samples, as shown,
    each answer one spoken turn."""
    page.select_option("#voice", "")  # the deployment's own voice
    page.wait_for_function(
        "() => !document.querySelector(\"#voice-code [data-code='python']\").textContent.includes('Ethan')"
    )
    _, secret = api_key_create(user=root, name="sample", scopes=["inference"])
    env = {**os.environ, "OMNISTAGE_API_KEY": secret}
    question = tmp_path / "question.wav"
    with wave.open(str(question), "wb") as out:  # a second of a 220 Hz tone, 24 kHz mono 16-bit
        out.setnchannels(1), out.setsampwidth(2), out.setframerate(24000)
        out.writeframes((3000 * np.sin(2 * np.pi * 220 * np.arange(24000) / 24000)).astype("<i2").tobytes())
    (tmp_path / "sample.py").write_text(page.text_content("#voice-code [data-code='python']"))
    ran = subprocess.run([PYTHON, "sample.py", str(question)], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("[user audio "), ran.stdout
    with wave.open(str(tmp_path / "answer.wav"), "rb") as answer:
        assert answer.getframerate() == 24000 and answer.getnframes() > 0
    if shutil.which("node") is None:
        return
    (tmp_path / "sample.mjs").write_text(page.text_content("#voice-code [data-code='javascript']"))
    ran = subprocess.run(["node", "--experimental-websocket", "sample.mjs"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert ran.returncode == 0 and "[user audio " in ran.stdout.replace("\n", ""), ran.stdout + ran.stderr


def styled_404(page, base: str) -> None:
    response = page.goto(f"{base}/no/such/page/")
    assert response.status == 404
    assert page.text_content("h1") == "Page not found"
    assert page.locator(".sidebar [data-nav='deployments']").is_visible()
    # the stylesheet applied: the code is drawn with the brand's gradient, not as plain text
    assert "gradient" in page.eval_on_selector(".error-code", "node => getComputedStyle(node).backgroundImage")
    icon = page.get_attribute("link[rel=icon]", "href")
    assert page.request.get(f"{base}{icon}").status == 200
    shot(page, "26-not-found")


@pytest.mark.timeout(900)
def test_the_consoles_rough_edges_in_a_browser(console_stack, root, page, tmp_path):
    base = console_stack.base
    deployment_create(name="talky", pipeline=Pipeline.objects.get(name="echo-voice"), model_dir="-",
                      deploy_config=FAST)  # fmt: skip
    sign_in(page, base)
    wait_running("talky", console_stack)
    chat_keeps_the_newest_player_in_sight(page, base)
    deployments_list_and_scale(page, base)
    catalog_search(page, base)
    key_copy_and_revoke(page, base)
    voice_code_follows_the_form(page, base)
    the_shown_code_runs(page, root, tmp_path)
    styled_404(page, base)
    assert page.errors == [] and page.dialogs == []
