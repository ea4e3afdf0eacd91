"""Fixtures of the audit tests: real PostgreSQL through pytest-django, users, keys, the pipelines,
and Redis (key revocations publish invalidations) on database 9 under a prefix unique to each test."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth import get_user_model
from procs import redis_database_url

from control_plane.deployments.management.commands.sync_pipelines import discover_pipelines, pipeline_sync

TEST_REDIS_DB = 9


@pytest.fixture(autouse=True)
def audit_redis(settings, redis_service):
    settings.REDIS_URL = redis_database_url(redis_service, TEST_REDIS_DB)
    settings.ACCOUNTS_REDIS_PREFIX = f"test-audit:{uuid.uuid4().hex[:12]}"
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(scope="session")
def pipeline_definitions():
    return discover_pipelines()


@pytest.fixture
def pipelines(db, pipeline_definitions):
    pipeline_sync(pipeline_definitions)


@pytest.fixture
def root(db):
    return get_user_model().objects.create_superuser("root", password="pw-123456", email="")


@pytest.fixture
def alice(db):
    return get_user_model().objects.create_user("alice", password="pw-123456")
