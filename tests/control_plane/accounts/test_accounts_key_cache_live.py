"""Two live web nodes (separate `manage.py web` processes on one database and one Redis): a key
each of them has cached is refused by both within 1 s of its revocation, and a scope change
holds on both too. Without the invalidation channel the nodes would answer from their caches
for ACCOUNTS_KEY_CACHE_TTL_S (300 s)."""

from __future__ import annotations

import time
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone
from procs import PYTHON, Proc, free_port, wait_for

from control_plane.accounts.models import ApiKey
from control_plane.accounts.services import api_key_create, api_key_revoke

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WARM_CALLS = 3


@pytest.fixture
def two_nodes(platform_env, tmp_path):
    nodes = []
    for index in (1, 2):
        port = free_port()
        proc = Proc([PYTHON, "manage.py", "web", "--port", str(port), "--processes", "1"], platform_env,
                    tmp_path / f"node{index}.log")  # fmt: skip
        nodes.append((proc, f"http://127.0.0.1:{port}"))
    try:
        for proc, _ in nodes:
            wait_for(lambda proc=proc: "serving on" in proc.output(), timeout=180, what="a web node up")
        yield [base for _, base in nodes]
    finally:
        for proc, _ in nodes:
            proc.stop()


def models(base: str, secret: str) -> int:
    return httpx.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {secret}"}, timeout=30).status_code


def warm(bases: list[str], secret: str) -> None:
    for base in bases:
        for _ in range(WARM_CALLS):  # the first call loads the key, the others are answered from the cache
            assert models(base, secret) == 200


def test_a_revoked_key_is_refused_by_every_node_within_a_second(two_nodes, make_user):
    key, secret = api_key_create(user=make_user(), name="two nodes", scopes=["inference"])
    warm(two_nodes, secret)
    # behind the cache's back (no invalidation): the nodes answer from memory, not the database
    ApiKey.objects.filter(pk=key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert [models(base, secret) for base in two_nodes] == [200, 200]
    api_key_revoke(key=key)
    revoked_at = time.monotonic()
    time.sleep(max(0.0, 1.0 - (time.monotonic() - revoked_at)))
    assert [models(base, secret) for base in two_nodes] == [401, 401]


def test_a_scope_taken_away_is_refused_by_every_node(two_nodes, make_user):
    key, secret = api_key_create(user=make_user(), name="two nodes", scopes=["inference", "keys"])
    warm(two_nodes, secret)
    key.scopes = ["keys"]
    key.save()
    time.sleep(1.0)
    assert [models(base, secret) for base in two_nodes] == [403, 403]


def test_a_deactivated_user_is_refused_by_every_node(two_nodes, make_user):
    user = make_user()
    _, secret = api_key_create(user=user, name="two nodes", scopes=["inference"])
    warm(two_nodes, secret)
    user.is_active = False
    user.save()
    time.sleep(1.0)
    assert [models(base, secret) for base in two_nodes] == [401, 401]
