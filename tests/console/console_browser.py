"""Debian's Chromium through Playwright for the console's browser tests, and what happens when
it (or another tool a browser test needs) is missing: a skip on a developer's machine, a
failure under CI=true, so that CI can never pass by skipping the browser suite."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from procs import REPO, unavailable

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]  # fmt: skip
SHOTS = REPO / "test-artifacts" / "console"
VIEWPORT = {"width": 1360, "height": 880}


def require_chromium(executable: Path = CHROMIUM) -> None:
    if not executable.exists():
        unavailable(f"Debian's Chromium is not installed at {executable} (apt-get install -y chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        unavailable("Playwright is not installed (pip install playwright)")


@contextmanager
def chromium_page(extra_args: list[str] | None = None) -> Iterator:
    """A watched page (see below) in a fresh headless Chromium."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=[*ARGS, *(extra_args or [])])
        try:
            yield watched(browser.new_context(viewport=VIEWPORT).new_page())
        finally:
            browser.close()


def watched(page):
    """The page, collecting its script errors in `page.errors` and the messages of its dialogs
    (alert, confirm) in `page.dialogs`, for the escaping checks. Dialogs are dismissed unless a
    test sets `page.accept_dialogs` (to answer a confirmation it expects)."""
    page.set_default_timeout(30_000)
    page.errors, page.dialogs, page.accept_dialogs = [], [], False
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.on("dialog", lambda dialog: _answer(page, dialog))
    return page


def _answer(page, dialog) -> None:
    page.dialogs.append(dialog.message)
    if page.accept_dialogs:
        dialog.accept()
    else:
        dialog.dismiss()


def shot(page, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
