"""Console fixtures: personas (alice and bob, plain users; root, an admin), the pipelines,
and a live platform (private redis-server, Celery worker, orchestrator, daphne)."""

from __future__ import annotations

import pytest
from console_stack import ConsoleStack
from live_stack import SharedStack

from control_plane.deployments.management.commands.sync_pipelines import discover_pipelines, pipeline_sync

PASSWORD = "correct horse battery"


@pytest.fixture(scope="session")
def pipeline_definitions():
    return discover_pipelines()


@pytest.fixture
def pipelines(db, pipeline_definitions):
    pipeline_sync(pipeline_definitions)


@pytest.fixture
def alice(db, django_user_model):
    return django_user_model.objects.create_user("alice", password=PASSWORD)


@pytest.fixture
def bob(db, django_user_model):
    return django_user_model.objects.create_user("bob", password=PASSWORD)


@pytest.fixture
def root(db, django_user_model):
    return django_user_model.objects.create_superuser("root", password=PASSWORD)


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


@pytest.fixture
def root_client(client, root):
    client.force_login(root)
    return client


@pytest.fixture(scope="session")
def console_platform(django_db_setup, tmp_path_factory):
    """The console tests' processes, shared by consecutive tests (`console_stack`; tests/live_stack.py).
    Stopped before the test database goes (hence django_db_setup)."""

    def start(platform_env: dict[str, str]) -> ConsoleStack:
        env = {**platform_env, "OMNISTAGE_REPLICA_BACKOFF_BASE_S": "1", "OMNISTAGE_REQUEST_STREAM_TTL_S": "120"}
        # replicas that load torch on a busy machine must not be declared dead: no failure detection is tested here
        env.update(OMNISTAGE_HEARTBEAT_INTERVAL="0.5", OMNISTAGE_HEARTBEAT_TTL="15")
        return ConsoleStack(env, tmp_path_factory.mktemp("console-platform"))

    shared = SharedStack(start)
    yield shared
    shared.close()


@pytest.fixture
def console_stack(console_platform, platform_env, pipelines, settings, request):
    stack = console_platform.acquire(platform_env, request)
    settings.REDIS_URL = stack.redis.url  # in-process consumers talk to the same Redis
    try:
        yield stack
    finally:
        console_platform.release()
