"""Fixtures of the accounts tests: real PostgreSQL/SQLite through pytest-django, real Redis
on database 9 (never 0, which the platform uses) under a key prefix unique to each test."""

from __future__ import annotations

import uuid

import pytest
import redis
from django.contrib.auth import get_user_model
from procs import redis_database_url
from victim_world import build_world

from control_plane.accounts.queries import quota_limits_forget
from control_plane.accounts.services import api_key_create
from control_plane.deployments.management.commands.sync_pipelines import discover_pipelines

TEST_REDIS_DB = 9


@pytest.fixture(autouse=True)
def accounts_redis(settings, redis_service):
    """Point the accounts app at Redis db 9 under a fresh prefix; delete that prefix afterwards."""
    url = redis_database_url(redis_service, TEST_REDIS_DB)
    prefix = f"test-accounts:{uuid.uuid4().hex[:12]}"
    settings.REDIS_URL = url
    settings.ACCOUNTS_REDIS_PREFIX = prefix
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast test users only
    quota_limits_forget()  # rows of earlier tests were rolled back without signals
    client = redis.Redis.from_url(url)
    yield client
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        client.delete(key)
    client.close()


@pytest.fixture
def make_user(db):
    counter = iter(range(1_000_000))

    def make(username: str | None = None, *, staff: bool = False, superuser: bool = False, password: str = "pw-123456"):
        name = username or f"user{next(counter)}-{uuid.uuid4().hex[:6]}"
        User = get_user_model()
        if superuser:
            return User.objects.create_superuser(username=name, password=password, email="")
        return User.objects.create_user(username=name, password=password, is_staff=staff)

    return make


@pytest.fixture
def make_key():
    def make(user, **kwargs):
        kwargs.setdefault("name", "test key")
        return api_key_create(user=user, **kwargs)

    return make


@pytest.fixture(scope="session")
def pipeline_definitions():
    return discover_pipelines()


@pytest.fixture
def world(make_user, pipeline_definitions, settings, tmp_path):
    """The victim, their objects and the principals that must not reach them (victim_world.py)."""
    settings.MEDIA_ROOT = tmp_path / "media"
    return build_world(make_user, pipeline_definitions)
