"""A browser test whose Chromium (or other tool) is missing skips on a developer's machine and
fails under CI=true: CI must never pass by skipping the browser suite."""

from __future__ import annotations

from pathlib import Path

import pytest
from console_browser import require_chromium, unavailable

NOWHERE = Path("/nonexistent/chromium")


@pytest.mark.parametrize("ci", [None, "", "false"])
def test_a_missing_browser_is_a_skip_outside_ci(monkeypatch, ci):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception, match="Chromium is not installed"):
        require_chromium(NOWHERE)


@pytest.mark.parametrize("ci", ["true", "TRUE", "1"])
def test_a_missing_browser_fails_under_ci(monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match="CI=true, so this fails instead of skipping"):
        require_chromium(NOWHERE)
    with pytest.raises(pytest.fail.Exception, match="espeak-ng"):
        unavailable("espeak-ng is not installed")
