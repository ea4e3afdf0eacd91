"""A malformed environment value stops start-up with one clear line, never a traceback."""

import os
import subprocess
import sys

import pytest
from procs import REPO


def manage_check(**env_overrides) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


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
def test_bad_environment_value_names_the_variable_and_the_expected_form(variable, value, expected):
    result = manage_check(**{variable: value})
    assert result.returncode != 0
    assert variable in result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_good_environment_passes_the_system_checks():
    result = manage_check()
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout
