"""A malformed environment value stops start-up with one clear line, never a traceback.

Each variable's check is the settings module's own code: it runs here, in this process, under the
malformed environment (a start-up that exits raises SystemExit with the line it prints). One
malformed value and the good environment also go through a real `manage.py check`, the path a
start-up takes."""

import os
import runpy
import subprocess
import sys

import pytest
from procs import REPO

SETTINGS = REPO / "control_plane" / "settings.py"
EXIT_PREFIX = "omnistage: configuration error: "


def manage_check(**env_overrides) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


def settings_exit_line(monkeypatch, variable: str, value: str) -> str:
    """The line the settings module exits with when `variable` is `value` (it must exit)."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as stopped:
        runpy.run_path(str(SETTINGS), run_name="settings_under_test")
    assert isinstance(stopped.value.code, str), stopped.value.code  # a string exits with 1, printed as is
    return stopped.value.code


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("DATABASE_URL", "mysql-ish-garbage", "a URL with scheme postgres/postgresql/sqlite"),
        ("DATABASE_URL", "postgres://127.0.0.1:notaport/db", "numeric port"),
        ("REDIS_URL", "http://127.0.0.1:6379", "a URL with scheme redis/rediss/unix"),
        ("DJANGO_DEBUG", "maybe", "a boolean"),
        ("OMNISTAGE_HEARTBEAT_TTL", "soon", "a number"),
        ("OMNISTAGE_PORT", "0", "an integer >= 1"),
        ("OMNISTAGE_LOG_LEVEL", "bogus", "one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
        ("OMNISTAGE_DEMO", "tiny-llm:llm", "a comma list of name:pipeline:checkpoint items"),
        ("OMNISTAGE_DEMO", "tiny-llm::qwen2", "a comma list of name:pipeline:checkpoint items"),
    ],
)
def test_bad_environment_value_names_the_variable_and_the_expected_form(monkeypatch, variable, value, expected):
    line = settings_exit_line(monkeypatch, variable, value)
    assert line.startswith(EXIT_PREFIX)
    assert "\n" not in line
    assert variable in line
    assert expected in line


def test_a_bad_value_stops_manage_py_with_that_line_and_no_traceback():
    result = manage_check(OMNISTAGE_HEARTBEAT_TTL="soon")
    assert result.returncode != 0
    assert EXIT_PREFIX in result.stderr
    assert "OMNISTAGE_HEARTBEAT_TTL" in result.stderr
    assert "a number" in result.stderr
    assert "Traceback" not in result.stderr


def test_good_environment_passes_the_system_checks():
    result = manage_check()
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout
