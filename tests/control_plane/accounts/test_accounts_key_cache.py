"""The API key cache: a known key is answered with no query, and whatever makes it unusable
(revocation, expiry, a deactivated user, changed scopes or allow-list) holds at the next use.
Changes are committed (transactional_db), so they also reach the Redis channel every process
listens to; tests/control_plane/accounts/test_accounts_key_cache_live.py checks another process."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from procs import wait_for

from control_plane import invalidation
from control_plane.accounts.key_cache import key_cache
from control_plane.accounts.services import aapi_key_authenticate, api_key_authenticate, api_key_create, api_key_revoke

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def listening():
    """The invalidation channel of this process, subscribed (the cache answers only then)."""
    wait_for(invalidation.listener().trusted, timeout=10, what="invalidation channel subscribed")
    key_cache.drop(invalidation.EVERYTHING)


def queries_of(function, *args) -> tuple[object, int]:
    with CaptureQueriesContext(connection) as captured:
        result = function(*args)
    return result, len(captured.captured_queries)


def cached_key(secret: str):
    """Authenticate until the key is answered from the cache. A load is not kept when an
    invalidation arrives meanwhile, such as the echo of the key's own creation: a few tries."""
    for _ in range(20):
        key, queries = queries_of(api_key_authenticate, secret)
        assert key is not None
        if queries == 0:
            return key
        time.sleep(0.05)
    raise AssertionError("the key was never answered from the cache")


def test_a_known_key_is_answered_without_a_query(make_user, listening):
    _, secret = api_key_create(user=make_user(), name="ci")
    first = cached_key(secret)
    again, queries = queries_of(api_key_authenticate, secret)
    assert again is first and queries == 0
    assert api_key_authenticate(secret[:-1] + ("x" if secret[-1] != "x" else "y")) is None  # same prefix, wrong secret


async def test_the_async_path_answers_from_the_cache_too(make_user, listening):
    from asgiref.sync import sync_to_async

    user = await sync_to_async(make_user)()
    _, secret = await sync_to_async(api_key_create)(user=user, name="ci")
    for _ in range(20):
        first = await aapi_key_authenticate(secret)
        if key_cache.get(first.prefix) is first:
            break
        time.sleep(0.05)
    assert first is not None and await aapi_key_authenticate(secret) is first


def test_a_revoked_key_is_refused_at_once(make_user, listening):
    key, secret = api_key_create(user=make_user(), name="ci")
    cached_key(secret)
    api_key_revoke(key=key)
    assert api_key_authenticate(secret) is None


def test_an_expired_key_is_refused_with_no_message(make_user, listening):
    user = make_user()
    for _ in range(5):  # a late echo of the key's creation may drop the entry while it expires: another key
        _, secret = api_key_create(user=user, name="ci", expires_at=timezone.now() + timedelta(seconds=1))
        cached = cached_key(secret)
        while cached.expires_at > timezone.now():
            time.sleep(0.05)
        if key_cache.get(cached.prefix) is cached:
            break
    key, queries = queries_of(api_key_authenticate, secret)
    assert key is None and queries == 0  # the cached expiry decides


def test_a_deactivated_user_loses_every_key(make_user, listening):
    user = make_user()
    _, one = api_key_create(user=user, name="one")
    _, two = api_key_create(user=user, name="two")
    cached_key(one), cached_key(two)
    user.is_active = False
    user.save()
    assert api_key_authenticate(one) is None and api_key_authenticate(two) is None


def test_changed_scopes_and_allow_list_are_seen_at_the_next_use(make_user, listening):
    key, secret = api_key_create(user=make_user(), name="ci", scopes=["inference", "keys"])
    cached_key(secret)
    key.scopes = ["keys"]
    key.allowed_deployments = ["only-this"]
    key.save()
    fresh = api_key_authenticate(secret)
    assert fresh.scopes == ["keys"] and fresh.allowed_deployments == ["only-this"]


def test_a_key_deleted_is_refused(make_user, listening):
    key, secret = api_key_create(user=make_user(), name="ci")
    cached_key(secret)
    key.delete()
    assert api_key_authenticate(secret) is None


def test_an_invalidation_published_by_another_process_drops_the_entry(make_user, listening):
    """What another web node sees: the message on the channel, not this process's own drop."""
    key, secret = api_key_create(user=make_user(), name="ci")
    cached_key(secret)
    listener = invalidation.listener()
    listener.publisher().publish(invalidation.channel(), f"key:{key.prefix}")
    wait_for(lambda: key_cache.get(key.prefix) is None, timeout=5, what="the entry dropped by the channel")


def test_the_cache_is_bypassed_while_the_channel_is_down(make_user, listening):
    _, secret = api_key_create(user=make_user(), name="ci")
    cached_key(secret)
    listener = invalidation.listener()
    listener.subscribed.clear()  # as when the connection to Redis is lost
    try:
        key, queries = queries_of(api_key_authenticate, secret)
        assert key is not None and queries >= 1
    finally:
        listener.subscribed.set()
