"""Fixtures shared by the whole suite: Redis (embedded unless REDIS_URL is set), the test
database's URL for live processes, and the environment those processes run with."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection
from parallel_workers import isolate_worker
from procs import METRICS_TOKEN, REPO, RedisServer, stop_all
from tiny_checkpoints import tiny_checkpoint

isolate_worker()


@pytest.fixture(scope="session", autouse=True)
def redis_service():
    """The Redis the suite talks to: REDIS_URL when set, else an embedded redis-server."""
    if not settings.EMBEDDED_REDIS:
        yield settings.REDIS_URL
        return
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1)
    try:
        client.ping()
        yield settings.REDIS_URL  # a `make run` is up: share its server
        return
    except redis.RedisError:
        pass
    server = RedisServer(settings.EMBEDDED_REDIS_SOCKET.parent).start()
    yield server.url
    server.stop()


def database_url_of(settings_dict: dict) -> str:
    engine = settings_dict["ENGINE"]
    if engine.endswith("sqlite3"):
        return f"sqlite:///{settings_dict['NAME']}"
    user = settings_dict.get("USER") or "postgres"
    password = f":{settings_dict['PASSWORD']}" if settings_dict.get("PASSWORD") else ""
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{settings_dict['NAME']}"


@pytest.fixture
def database_url(transactional_db) -> str:
    """The URL of the test database, for processes the test starts (data is committed)."""
    return database_url_of(connection.settings_dict)


@pytest.fixture
def platform_env(database_url, tmp_path_factory) -> dict[str, str]:
    """Environment for live platform processes: the test database, fast heartbeats; checkpoints
    the tests build under their temporary directories may be deployed. The same for every test
    (a stack shared by several tests is one of this environment: tests/live_stack.py)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "DJANGO_SETTINGS"))}
    env.update(
        DATABASE_URL=database_url,
        REDIS_URL=settings.REDIS_URL,
        DJANGO_SETTINGS_MODULE="control_plane.settings",
        OMNISTAGE_VAR_DIR=str(REPO / "var"),
        OMNISTAGE_HEARTBEAT_INTERVAL="0.3",
        OMNISTAGE_HEARTBEAT_TTL="1.5",
        PYTHONUNBUFFERED="1",
        OMNISTAGE_METRICS_TOKEN=METRICS_TOKEN,
        OMNISTAGE_MODEL_DIR_ROOTS=str(tmp_path_factory.getbasetemp()),
    )
    return env


LIVE_FIXTURES = {"platform_env", "redis_url"}
"""Fixtures that start or reach real platform processes: tests using them are marked `live`."""


def pytest_collection_modifyitems(config, items):
    for item in items:
        if LIVE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.live)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After each test's own teardown: stop the shared live stacks the next test leaves idle."""
    from live_stack import close_idle_stacks

    result = yield
    close_idle_stacks(nextitem)
    return result


def pytest_sessionfinish(session, exitstatus):
    """Stop any live server a failed fixture left running (it would hold ports and connections)."""
    stop_all()


@pytest.fixture(scope="session")
def repo_tiny_models() -> Path:
    """The tiny demo checkpoints the tests open under the repository's var/models (where `make run`
    builds them): built once per run if a clean checkout has none (complete ones are kept)."""
    for name in ("qwen2", "qwen2_5_omni"):
        tiny_checkpoint(name)
    return REPO / "var" / "models"


@pytest.fixture(scope="session")
def tiny_omni() -> Path:
    """The tiny Qwen2.5-Omni checkpoint (thinker, talker, token2wav), shared by the whole run."""
    return tiny_checkpoint("qwen2_5_omni")
