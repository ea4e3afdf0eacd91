"""`manage.py bootstrap`, what `make run` does before starting the platform: the pipeline families, the admin
user, one API key printed once and stored hashed, and the demo deployments; a second run prints no secret."""

import os
import re
import subprocess

from procs import PYTHON, REPO


def manage(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [PYTHON, "manage.py", *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def fresh_machine_env(tmp_path) -> dict[str, str]:
    """Embedded mode in a private var dir: SQLite, no Redis, one small demo deployment."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST_", "DJANGO_SETTINGS")) and key not in ("DATABASE_URL", "REDIS_URL")
    }
    env.update(OMNISTAGE_VAR_DIR=str(tmp_path / "var"), OMNISTAGE_DEMO="tiny-llm:llm:qwen2", PYTHONUNBUFFERED="1")
    return env


CHECK_DATABASE = """
from django.contrib.auth import get_user_model
from control_plane.accounts.models import ApiKey
from control_plane.accounts.services import api_key_authenticate
from control_plane.deployments.models import Deployment, Pipeline
admin = get_user_model().objects.get(username="admin")
print("superuser", admin.is_superuser)
print("password ok", admin.check_password({password!r}))
print("keys", ApiKey.objects.filter(user=admin).count())
print("secret stored", any({secret!r} in str(value) for key in ApiKey.objects.all() for value in vars(key).values()))
print("key authenticates", api_key_authenticate({secret!r}).user == admin)
print("deployments", sorted(Deployment.objects.values_list("name", flat=True)))
print("pipelines", Pipeline.objects.count() > 0)
"""


def test_bootstrap_creates_the_admin_one_key_shown_once_and_the_demo(tmp_path):
    env = fresh_machine_env(tmp_path)
    manage(env, "migrate", "--noinput")
    first = manage(env, "bootstrap").stdout
    password = re.search(r"Created admin user 'admin' with password: (\S+)", first).group(1)
    secret = re.search(r"Created API key 'default': (\S+)", first).group(1)
    assert "Created demo deployment 'tiny-llm' (llm)" in first
    assert (tmp_path / "var" / "models" / "qwen2" / "config.json").is_file()
    assert "models: 1 created" in first  # the registry knows the checkpoint the demo built

    second = manage(env, "bootstrap").stdout
    assert password not in second and secret not in second
    assert "secrets are never shown again" in second

    check = manage(env, "shell", "-c", CHECK_DATABASE.format(password=password, secret=secret)).stdout
    assert "superuser True" in check
    assert "password ok True" in check
    assert "keys 1" in check
    assert "secret stored False" in check
    assert "key authenticates True" in check
    assert "deployments ['tiny-llm']" in check
    assert "pipelines True" in check
