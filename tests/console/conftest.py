"""Console fixtures: personas (alice and bob, plain users; root, an admin), the pipelines,
and a live platform (private redis-server, Celery worker, orchestrator, daphne)."""

from __future__ import annotations

import time

import pytest
from console_stack import ConsoleStack

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


@pytest.fixture
def console_stack(platform_env, tmp_path, pipelines, settings):
    env = {**platform_env, "OMNISTAGE_REPLICA_BACKOFF_BASE_S": "1", "OMNISTAGE_REQUEST_STREAM_TTL_S": "120"}
    # replicas that load torch on a busy machine must not be declared dead: no failure detection is tested here
    env.update(OMNISTAGE_HEARTBEAT_INTERVAL="0.5", OMNISTAGE_HEARTBEAT_TTL="15")
    # one torch thread per replica host: several hosts on a small shared machine oversubscribe the
    # cores, and OpenMP's spinning threads then make the tiny omni pipeline 7-15x slower (measured here)
    env.setdefault("OMP_NUM_THREADS", "1")
    stack = ConsoleStack(env, tmp_path)
    settings.REDIS_URL = stack.redis.url  # in-process consumers talk to the same Redis
    yield stack
    from control_plane.deployments.models import Deployment

    Deployment.objects.update(desired_state="STOPPED")
    time.sleep(1.0)
    stack.stop()
