"""The operator's path through the admin: create a user, give them a key and a quota, see their usage."""

from __future__ import annotations

import re

import pytest
from accounts_helpers import bearer, session

from control_plane.accounts.models import ApiKey, Quota
from control_plane.accounts.quota import QuotaExceeded, quota_admit
from control_plane.accounts.usage import usage_record


def test_operator_creates_a_user_a_key_and_a_quota_then_sees_the_usage(make_user):
    admin = session(make_user("root", superuser=True))
    created = admin.post(
        "/admin/auth/user/add/",
        {
            "username": "carol",
            "password1": "a-long-pass-phrase",
            "password2": "a-long-pass-phrase",
            "usable_password": "true",
        },
    )
    assert created.status_code == 302, created.context["adminform"].form.errors
    from django.contrib.auth import get_user_model

    carol = get_user_model().objects.get(username="carol")

    page = admin.post(
        "/admin/accounts/apikey/add/",
        {"user": carol.pk, "name": "carol's app", "scopes": ["inference"], "allowed_deployments": "tiny-llm, omni"},
    )
    assert page.status_code == 200
    secret = re.search(r'value="(omni-[^"]+)"', page.content.decode()).group(1)
    key = ApiKey.objects.get(user=carol)
    assert key.allowed_deployments == ["tiny-llm", "omni"] and key.scopes == ["inference"]
    assert secret not in admin.get("/admin/accounts/apikey/").content.decode()

    quota = admin.post(
        "/admin/accounts/quota/add/",
        {"metric": "requests", "window": "day", "limit": "1", "is_active": "on", "user": carol.pk, "api_key": ""},
    )
    assert quota.status_code == 302, quota.content.decode()[:3000]
    assert Quota.objects.get(user=carol).limit == 1

    assert bearer(secret).get("/api/quota/").json()["limits"][0]["remaining"] == 1
    admission = quota_admit(user=carol, api_key=key, estimate={"text_tokens": 50})
    usage_record(
        request_id="carol-1", user=carol, api_key=key, deployment="tiny-llm", modality="text",
        admission=admission, text_tokens_in=12, text_tokens_out=30,
    )  # fmt: skip
    with pytest.raises(QuotaExceeded):
        quota_admit(user=carol, api_key=key)

    usage = admin.get(f"/admin/accounts/usagerecord/?user__id__exact={carol.pk}").content.decode()
    assert "carol-1" in usage and "tiny-llm" in usage
    user_page = admin.get(f"/admin/auth/user/{carol.pk}/change/").content.decode()
    assert "View usage" in user_page and key.prefix in user_page


def test_admin_refuses_an_admin_scope_for_a_non_staff_user(make_user):
    admin = session(make_user(superuser=True))
    user = make_user()
    page = admin.post("/admin/accounts/apikey/add/", {"user": user.pk, "name": "x", "scopes": ["admin"]})
    assert page.status_code == 200 and "Only staff users" in page.content.decode()
    assert not ApiKey.objects.filter(user=user).exists()


def test_admin_rejects_a_quota_for_both_a_user_and_a_key_and_windowed_concurrency(make_user, make_key):
    admin = session(make_user(superuser=True))
    user = make_user()
    key, _ = make_key(user)
    both = admin.post(
        "/admin/accounts/quota/add/",
        {"metric": "requests", "window": "day", "limit": "5", "user": user.pk, "api_key": key.pk},
    )
    assert both.status_code == 200 and "not both" in both.content.decode()
    windowed = admin.post(
        "/admin/accounts/quota/add/", {"metric": "concurrent_requests", "window": "day", "limit": "2", "user": user.pk}
    )
    assert windowed.status_code == 200 and "no window" in windowed.content.decode()
    assert not Quota.objects.exists()


def test_revoke_action(make_user, make_key):
    admin = session(make_user(superuser=True))
    key, secret = make_key(make_user())
    response = admin.post("/admin/accounts/apikey/", {"action": "revoke_keys", "_selected_action": [key.pk]})
    assert response.status_code == 302
    key.refresh_from_db()
    assert key.revoked_at is not None and bearer(secret).get("/api/quota/").status_code == 401


@pytest.mark.django_db(transaction=True)
def test_concurrent_adds_of_one_username_never_answer_500(make_user):
    """Admins adding the same user at once: one is created, the others see the form's error."""
    import threading

    from django.contrib.auth import get_user_model
    from django.db import connection

    make_user("root", superuser=True)
    root = get_user_model().objects.get(username="root")
    threads_count = 6
    barrier = threading.Barrier(threads_count)
    statuses: list[int] = []

    def add_dave():
        try:
            admin = session(root)
            admin.raise_request_exception = False
            barrier.wait(timeout=30)
            response = admin.post("/admin/auth/user/add/", {"username": "dave", "password1": "a-long-pass-phrase",
                                  "password2": "a-long-pass-phrase", "usable_password": "true"})  # fmt: skip
            statuses.append(response.status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=add_dave) for _ in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(statuses) == [200] * (threads_count - 1) + [302], statuses
    assert get_user_model().objects.filter(username="dave").count() == 1
