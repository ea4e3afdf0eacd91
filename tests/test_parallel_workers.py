"""What each parallel test worker has to itself (tests/parallel_workers.py)."""

from __future__ import annotations

import os

from django.conf import settings
from parallel_workers import group_of, redis_url_of_worker, worker_number


def test_a_worker_gets_the_database_after_its_number_on_the_same_server():
    assert redis_url_of_worker("redis://127.0.0.1:6379/0", 0) == "redis://127.0.0.1:6379/1"
    assert redis_url_of_worker("redis://:pw@cache:6380/0", 3) == "redis://:pw@cache:6380/4"


def test_this_worker_and_the_processes_it_starts_use_its_database():
    number = worker_number()
    if number is not None and not settings.EMBEDDED_REDIS:
        assert settings.REDIS_URL.endswith(f"/{number + 1}")
        assert os.environ["REDIS_URL"] == settings.REDIS_URL
        assert settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]["address"] == settings.REDIS_URL


def test_a_file_is_its_own_group_and_the_two_host_tests_share_one():
    assert group_of("tests/stages/test_x.py") == "tests/stages/test_x.py"
    assert group_of("tests/hosts/test_hosts_loss.py") == group_of("tests/hosts/test_hosts_bed.py") == "hosts"
