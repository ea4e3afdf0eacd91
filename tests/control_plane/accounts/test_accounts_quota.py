"""Quota admission against real Redis: atomic under concurrency, settled, refunded, released."""

from __future__ import annotations

import json
import random
import threading
import time

import pytest
from accounts_helpers import bearer
from django.db import connections

from control_plane.accounts.models import Quota, UsageRecord
from control_plane.accounts.queries import quota_status
from control_plane.accounts.quota import (
    QuotaExceeded,
    QuotaUnavailable,
    quota_admit,
    quota_refund,
    quota_release,
    quota_renew,
    quota_settle,
)
from control_plane.accounts.usage import usage_record
from control_plane.inference.errors import quota_exceeded_error, quota_unavailable_error


def run_concurrently(attempts: int, threads: int, attempt) -> list:
    """Run `attempt(i)` for i in range(attempts) on `threads` threads released together."""
    results: list = [None] * attempts
    start = threading.Barrier(threads)
    indices = iter(range(attempts))
    lock = threading.Lock()

    def worker():
        try:
            start.wait()
            while True:
                with lock:
                    i = next(indices, None)
                if i is None:
                    return
                try:
                    results[i] = attempt(i)
                except Exception as error:  # collected and asserted on by the test
                    results[i] = error
        finally:
            connections.close_all()  # this thread's database connection

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return results


def used(user, key=None, metric="requests") -> float:
    return next(s.used for s in quota_status(user=user, api_key=key) if s.limit.metric == metric)


@pytest.mark.django_db(transaction=True)
def test_200_concurrent_requests_against_a_quota_of_50_admit_exactly_50_and_usage_adds_up(make_user, make_key):
    user = make_user()
    key, secret = make_key(user)
    Quota.objects.create(user=user, metric="requests", window="day", limit=50)
    Quota.objects.create(api_key=key, metric="text_tokens", window="day", limit=10**9)
    rng = random.Random(7)
    spent = [(rng.randint(1, 40), rng.randint(1, 60)) for _ in range(200)]  # (tokens in, tokens out)

    def request(i: int):
        admission = quota_admit(user=user, api_key=key, estimate={"text_tokens": 200})
        tokens_in, tokens_out = spent[i]
        usage_record(
            request_id=f"req-{i}",
            user=user,
            api_key=key,
            deployment="tiny-llm",
            modality="text",
            admission=admission,
            text_tokens_in=tokens_in,
            text_tokens_out=tokens_out,
        )
        return admission

    results = run_concurrently(200, threads=24, attempt=request)

    admitted = [i for i, result in enumerate(results) if not isinstance(result, Exception)]
    refused = [result for result in results if isinstance(result, Exception)]
    assert len(admitted) == 50
    assert len(refused) == 150 and all(isinstance(error, QuotaExceeded) for error in refused)
    assert all(error.limit.metric == "requests" and error.retry_after_s >= 1 for error in refused)
    assert used(user) == 50
    expected_tokens = sum(spent[i][0] + spent[i][1] for i in admitted)
    assert used(user, key, "text_tokens") == expected_tokens  # reservations settled to actual usage
    assert UsageRecord.objects.count() == 50

    response = bearer(secret).get("/api/usage/", {"group_by": "key"})
    assert response.status_code == 200, response.content
    totals = response.json()["totals"]
    assert totals["requests"] == 50
    assert totals["text_tokens_in"] == sum(spent[i][0] for i in admitted)
    assert totals["text_tokens_out"] == sum(spent[i][1] for i in admitted)
    assert response.json()["rows"][0]["text_tokens_out"] == totals["text_tokens_out"]


@pytest.mark.django_db(transaction=True)
def test_concurrent_token_reservations_never_overshoot(make_user):
    user = make_user()
    Quota.objects.create(user=user, metric="text_tokens", window="minute", limit=1000)
    results = run_concurrently(100, threads=16, attempt=lambda i: quota_admit(user=user, estimate={"text_tokens": 30}))
    admitted = [result for result in results if not isinstance(result, Exception)]
    assert len(admitted) == 33  # 33 * 30 = 990 <= 1000 < 34 * 30
    assert used(user, metric="text_tokens") == 990


@pytest.mark.django_db
def test_settle_debits_actual_usage_and_frees_room(make_user):
    user = make_user()
    Quota.objects.create(user=user, metric="text_tokens", window="day", limit=1000)
    admission = quota_admit(user=user, estimate={"text_tokens": 600})
    assert used(user, metric="text_tokens") == 600
    with pytest.raises(QuotaExceeded):
        quota_admit(user=user, estimate={"text_tokens": 500})
    assert quota_settle(admission, {"text_tokens": 100}) is True
    assert used(user, metric="text_tokens") == 100
    assert quota_settle(admission, {"text_tokens": 999}) is False  # idempotent: settled once
    assert used(user, metric="text_tokens") == 100
    quota_admit(user=user, estimate={"text_tokens": 800})
    assert used(user, metric="text_tokens") == 900


@pytest.mark.django_db
def test_usage_above_the_estimate_is_debited_and_blocks_the_next_request(make_user):
    user = make_user()
    Quota.objects.create(user=user, metric="audio_seconds_out", window="day", limit=60)
    admission = quota_admit(user=user, estimate={"audio_seconds_out": 10})
    quota_settle(admission, {"audio_seconds_out": 61.5})
    assert used(user, metric="audio_seconds_out") == 61.5
    with pytest.raises(QuotaExceeded) as refused:
        quota_admit(user=user, estimate={"audio_seconds_out": 1})
    assert refused.value.limit.metric == "audio_seconds_out"
    quota_admit(user=user, estimate={"text_tokens": 5})  # a metric without a rule is not checked


@pytest.mark.django_db
def test_refund_returns_work_never_done_but_counts_the_request(make_user):
    user = make_user()
    Quota.objects.create(user=user, metric="images", window="day", limit=4)
    Quota.objects.create(user=user, metric="requests", window="minute", limit=10)
    admission = quota_admit(user=user, estimate={"images": 4})
    assert used(user, metric="images") == 4
    assert quota_refund(admission) is True
    assert used(user, metric="images") == 0
    assert used(user, metric="requests") == 1
    quota_admit(user=user, estimate={"images": 4})


@pytest.mark.django_db
def test_concurrency_slots_are_held_until_release_or_settle(make_user):
    user = make_user()
    Quota.objects.create(user=user, metric="concurrent_requests", window="none", limit=2)
    first = quota_admit(user=user)
    second = quota_admit(user=user)
    with pytest.raises(QuotaExceeded) as refused:
        quota_admit(user=user)
    assert refused.value.limit.metric == "concurrent_requests"
    assert refused.value.error_type == "requests"
    assert quota_release(first) == 1
    assert quota_release(first) == 0  # idempotent
    third = quota_admit(user=user)
    assert quota_renew(third) == 1
    quota_settle(second, {})
    assert quota_renew(second) == 0
    quota_admit(user=user)
    with pytest.raises(QuotaExceeded):
        quota_admit(user=user)


@pytest.mark.django_db
def test_a_slot_whose_lease_ran_out_is_freed(make_user, settings):
    settings.ACCOUNTS_QUOTA_LEASE_S = 0.2
    user = make_user()
    Quota.objects.create(user=user, metric="concurrent_requests", window="none", limit=1)
    quota_admit(user=user)  # never released: its process "crashed"
    with pytest.raises(QuotaExceeded):
        quota_admit(user=user)
    time.sleep(0.3)
    quota_admit(user=user)


@pytest.mark.django_db
def test_user_rules_count_every_key_and_key_rules_only_theirs(make_user, make_key):
    user = make_user()
    key_a, _ = make_key(user, name="a")
    key_b, _ = make_key(user, name="b")
    Quota.objects.create(user=user, metric="requests", window="minute", limit=3)
    Quota.objects.create(api_key=key_a, metric="requests", window="minute", limit=2)
    quota_admit(user=user, api_key=key_a)
    quota_admit(user=user, api_key=key_a)
    with pytest.raises(QuotaExceeded) as by_key:
        quota_admit(user=user, api_key=key_a)
    assert by_key.value.limit.subject_kind == "key"
    quota_admit(user=user, api_key=key_b)
    with pytest.raises(QuotaExceeded) as by_user:
        quota_admit(user=user, api_key=key_b)
    assert by_user.value.limit.subject_kind == "user"


@pytest.mark.django_db
def test_default_rules_apply_to_each_user_unless_overridden(make_user):
    alice, bob = make_user(), make_user()
    Quota.objects.create(metric="requests", window="minute", limit=1)
    Quota.objects.create(user=bob, metric="requests", window="minute", limit=3)
    Quota.objects.create(user=bob, metric="images", window="day", limit=1, is_active=False)
    quota_admit(user=alice)
    with pytest.raises(QuotaExceeded):
        quota_admit(user=alice)
    for _ in range(3):
        quota_admit(user=bob, estimate={"images": 5})  # the inactive image rule is ignored
    with pytest.raises(QuotaExceeded):
        quota_admit(user=bob)


@pytest.mark.django_db
def test_a_request_larger_than_the_limit_is_refused_and_says_so(make_user):
    user = make_user()
    Quota.objects.create(user=user, metric="video_seconds", window="day", limit=10)
    with pytest.raises(QuotaExceeded) as refused:
        quota_admit(user=user, estimate={"video_seconds": 12})
    assert "too large" in refused.value.message
    assert used(user, metric="video_seconds") == 0


@pytest.mark.django_db
def test_bad_estimates_are_programming_errors(make_user):
    user = make_user()
    with pytest.raises(ValueError, match="unknown quota metric"):
        quota_admit(user=user, estimate={"tokens": 1})
    with pytest.raises(ValueError, match=">= 0"):
        quota_admit(user=user, estimate={"images": -1})


@pytest.mark.django_db
def test_429_has_the_openai_error_shape_and_rate_limit_headers(make_user):
    user = make_user()
    Quota.objects.create(user=user, metric="requests", window="minute", limit=2)
    Quota.objects.create(user=user, metric="text_tokens", window="minute", limit=100)
    admission = quota_admit(user=user, estimate={"text_tokens": 40})
    assert admission.headers["x-ratelimit-limit-requests"] == "2"
    assert admission.headers["x-ratelimit-remaining-requests"] == "1"
    assert admission.headers["x-ratelimit-remaining-tokens"] == "60"
    with pytest.raises(QuotaExceeded) as refused:
        quota_admit(user=user, estimate={"text_tokens": 70})
    response = quota_exceeded_error(refused.value).response()
    assert response.status_code == 429
    body = json.loads(response.content)
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == "rate_limit_exceeded" and body["error"]["type"] == "tokens"
    assert 1 <= int(response["Retry-After"]) <= 60
    assert int(response["retry-after-ms"]) >= 1000
    assert response["x-ratelimit-limit-tokens"] == "100"
    assert response["x-ratelimit-remaining-tokens"] == "60"
    assert response["x-ratelimit-remaining-requests"] == "1"
    assert response["x-ratelimit-reset-requests"].endswith("s")


@pytest.mark.django_db
def test_admission_fails_closed_when_redis_is_down(make_user, settings):
    user = make_user()
    Quota.objects.create(user=user, metric="requests", window="minute", limit=2)
    settings.REDIS_URL = "redis://127.0.0.1:1/9"
    with pytest.raises(QuotaUnavailable):
        quota_admit(user=user)
    response = quota_unavailable_error().response()
    assert response.status_code == 503 and response["Retry-After"] == "1"


@pytest.mark.django_db
def test_no_rules_means_no_redis_round_trip(make_user, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/9"
    admission = quota_admit(user=make_user(), estimate={"text_tokens": 10})
    assert admission.headers == {}


@pytest.mark.django_db
def test_quota_api_reports_what_is_left(make_user, make_key):
    user = make_user()
    key, secret = make_key(user)
    Quota.objects.create(user=user, metric="requests", window="minute", limit=5)
    Quota.objects.create(api_key=key, metric="images", window="day", limit=3)
    quota_admit(user=user, api_key=key, estimate={"images": 2})
    response = bearer(secret).get("/api/quota/")
    assert response.status_code == 200, response.content
    limits = {(item["subject"], item["metric"]): item for item in response.json()["limits"]}
    assert limits[("user", "requests")]["remaining"] == 4
    assert limits[("key", "images")]["used"] == 2 and limits[("key", "images")]["remaining"] == 1
    assert 0 < limits[("key", "images")]["reset_seconds"] <= 86400


@pytest.mark.django_db
def test_realtime_rate_limits_event_payload(make_user):
    from control_plane.accounts.queries import realtime_rate_limits

    user = make_user()
    Quota.objects.create(user=user, metric="realtime_minutes", window="day", limit=30)
    Quota.objects.create(user=user, metric="text_tokens", window="minute", limit=1000)
    quota_admit(user=user, estimate={"realtime_minutes": 25, "text_tokens": 10})
    limits = realtime_rate_limits(user=user)
    assert [entry["name"] for entry in limits] == ["realtime_minutes", "tokens"]
    assert limits[0]["remaining"] == 5 and limits[1]["remaining"] == 990
