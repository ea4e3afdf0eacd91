"""The deployment page's edit form and revision history in a real browser (Debian's Chromium through
Playwright) against a live platform: a bad value is reported on its field, a change of a running
echo deployment's default sampling rolls out (its revision goes from rolling out to serving and the
deployment answers with the new config), and the rollback button restores the first revision.
Screenshots go to test-artifacts/console/."""

from __future__ import annotations

import httpx
import pytest
from console_browser import chromium_page, shot
from console_stack import wait_running
from procs import wait_for

from control_plane.accounts.services import api_key_create
from control_plane.deployments.models import Deployment, DeploymentRevision, Pipeline
from control_plane.deployments.services import deployment_create

PASSWORD = "correct horse battery"
FAST = {"stages": {"echo": {"options": {"delay_s": 0.01}}}}
PROMPT = "one two three four five"

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


def answer(base: str, secret: str) -> str:
    body = {"model": "edited", "messages": [{"role": "user", "content": PROMPT}]}
    response = httpx.post(f"{base}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {secret}"},
                          timeout=60)  # fmt: skip
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


def revision_serves(number: int):
    def serving():
        revision = DeploymentRevision.objects.get(deployment__name="edited", number=number)
        assert revision.state != "FAILED", revision.state_reason
        return revision.state == "ACTIVE"

    return serving


def test_edit_form_rolls_a_change_out_and_rolls_it_back(console_stack, root, page):
    base = console_stack.base
    deployment_create(name="edited", pipeline=Pipeline.objects.get(name="echo"), model_dir="-", deploy_config=FAST,
                      user=root)  # fmt: skip
    wait_running("edited", console_stack)
    _, secret = api_key_create(user=root, name="chat", scopes=["inference"])
    assert answer(base, secret) == PROMPT

    sign_in(page, base)
    page.goto(f"{base}/deployments/edited/")
    page.click("#edit-config")
    page.wait_for_selector("h1:text('Edit edited')")
    assert page.input_value("[name='stages.echo.options']") == '{"delay_s": 0.01}'  # the config serving
    page.fill("[name='stages.echo.replicas']", "0")
    page.fill("[name='stages.echo.sampling']", '{"max_tokens": 2}')
    page.click("#edit-form button[type=submit]")
    assert page.text_content("[data-field='stages.echo.replicas'] .errorlist") == "must be at least 1"
    shot(page, "revisions-01-edit-error")
    assert DeploymentRevision.objects.filter(deployment__name="edited").count() == 1

    page.fill("[name='stages.echo.replicas']", "1")
    page.click("#edit-form button[type=submit]")
    page.wait_for_url(f"{base}/deployments/edited/")
    assert "Revision 2 saved" in page.text_content(".messages")
    assert page.get_attribute("[data-revision='2']", "data-state") in ("ROLLING", "ACTIVE")
    shot(page, "revisions-02-rolling")
    wait_for(revision_serves(2), timeout=180, what="revision 2 serving")
    assert answer(base, secret) == "one two"
    page.reload()
    assert page.get_attribute("[data-revision='2']", "data-state") == "ACTIVE"
    assert "stages.echo.sampling.max_tokens" in page.text_content("[data-revision='2']")
    shot(page, "revisions-03-rolled-out")

    page.accept_dialogs = True
    page.click("[data-revision='1'] button:text('Roll back to 1')")
    page.wait_for_selector("[data-revision='3']")
    assert "back to 1" in page.text_content("[data-revision='3']")
    wait_for(revision_serves(3), timeout=180, what="revision 3 serving")
    assert answer(base, secret) == PROMPT
    page.reload()
    assert page.get_attribute("[data-revision='3']", "data-state") == "ACTIVE"
    assert page.get_attribute("[data-revision='2']", "data-state") == "SUPERSEDED"
    shot(page, "revisions-04-rolled-back")
    assert Deployment.objects.get(name="edited").deploy_config["stages"]["echo"]["sampling"] == {}
    assert page.errors == []
