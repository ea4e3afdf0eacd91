"""API keys: hashed at rest, shown once, scoped, revocable, expiring; CSRF on session writes;
secrets never in the database or the logs."""

from __future__ import annotations

import hmac
import logging
from datetime import timedelta

import pytest
from accounts_helpers import bearer, session
from django.db import connection
from django.test import Client, RequestFactory
from django.utils import timezone

from control_plane.accounts import keys as key_format
from control_plane.accounts.models import ApiKey
from control_plane.accounts.permissions import AccessDenied, check_access, principal_scopes
from control_plane.accounts.principal import request_principal
from control_plane.accounts.services import api_key_authenticate, api_key_create, api_key_revoke

CSRF_SECRET = "a" * 32  # Django accepts the unmasked 32-character secret in the header


def test_a_key_is_stored_as_its_hash_with_a_visible_prefix(make_user):
    key, secret = api_key_create(user=make_user(), name="ci")
    assert secret.startswith(f"omni-{key.prefix}-")
    assert key.hashed_secret == key_format.hash_secret(secret) and secret not in key.hashed_secret
    assert api_key_authenticate(secret) == key


def test_authentication_compares_hashes_in_constant_time(make_user, monkeypatch):
    key, secret = api_key_create(user=make_user(), name="ci")
    calls = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: calls.append((a, b)) or real(a, b))
    forged = secret[:-4] + "AAAA"
    assert api_key_authenticate(forged) is None
    assert calls and calls[-1][1] == key.hashed_secret


@pytest.mark.parametrize("state", ["revoked", "expired", "inactive user", "forged", "malformed"])
def test_unusable_keys_do_not_authenticate(make_user, state):
    user = make_user()
    key, secret = api_key_create(user=user, name="ci")
    if state == "revoked":
        api_key_revoke(key=key)
    elif state == "expired":
        ApiKey.objects.filter(pk=key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    elif state == "inactive user":
        user.is_active = False
        user.save()
    elif state == "forged":
        secret = f"omni-{key.prefix}-{'x' * 43}"
    else:
        secret = "not-a-key"
    assert api_key_authenticate(secret) is None
    response = bearer(secret).get("/api/keys/")
    assert response.status_code == 401 and response["WWW-Authenticate"] == "Bearer"


def test_creating_keys_validates_scopes_expiry_and_escalation(make_user):
    from django.core.exceptions import ValidationError

    user = make_user()
    with pytest.raises(ValidationError, match="staff"):
        api_key_create(user=user, name="x", scopes=["admin"])
    with pytest.raises(ValidationError, match="Unknown scopes"):
        api_key_create(user=user, name="x", scopes=["root"])
    with pytest.raises(ValidationError, match="future"):
        api_key_create(user=user, name="x", expires_at=timezone.now() - timedelta(minutes=1))
    narrow, _ = api_key_create(user=user, name="narrow", scopes=["keys", "inference"], allowed_deployments=["a"])
    with pytest.raises(ValidationError, match="scopes it does not hold"):
        api_key_create(user=user, name="x", scopes=["deployments:write"], created_with=narrow)
    with pytest.raises(ValidationError, match="restricted"):
        api_key_create(user=user, name="x", scopes=["inference"], created_with=narrow)
    api_key_create(user=user, name="ok", scopes=["inference"], allowed_deployments=["a"], created_with=narrow)


def test_self_service_keys_create_list_revoke(make_user):
    user = make_user()
    client = session(user)
    created = client.post(
        "/api/keys/",
        {"name": "laptop", "scopes": ["inference"], "allowed_deployments": ["tiny-llm"]},
        content_type="application/json",
    )
    assert created.status_code == 201, created.content
    body = created.json()
    secret = body["key"]
    assert secret.startswith(f"omni-{body['prefix']}-") and created["Cache-Control"] == "no-store"
    listed = client.get("/api/keys/")
    assert listed.status_code == 200 and secret not in listed.content.decode()
    assert [item["prefix"] for item in listed.json()] == [body["prefix"]]
    assert "key" not in client.get(f"/api/keys/{body['id']}/").json()

    as_key = bearer(secret)
    assert as_key.get("/api/quota/").status_code == 200  # inference scope
    assert as_key.get("/api/keys/").status_code == 403  # no "keys" scope
    revoked = client.post(f"/api/keys/{body['id']}/revoke/")
    assert revoked.status_code == 200 and revoked.json()["is_active"] is False
    assert as_key.get("/api/quota/").status_code == 401


def test_api_creation_refuses_admin_scope_for_non_staff(make_user):
    response = session(make_user()).post(
        "/api/keys/", {"name": "x", "scopes": ["admin"]}, content_type="application/json"
    )
    assert response.status_code == 400 and "scopes" in response.json()


def test_session_writes_need_a_csrf_token_and_key_writes_do_not(make_user, make_key):
    user = make_user()
    client = session(user, enforce_csrf=True)
    payload = {"name": "x"}
    refused = client.post("/api/keys/", payload, content_type="application/json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]
    assert ApiKey.objects.filter(user=user).count() == 0
    client.cookies["csrftoken"] = CSRF_SECRET
    accepted = client.post("/api/keys/", payload, content_type="application/json", HTTP_X_CSRFTOKEN=CSRF_SECRET)
    assert accepted.status_code == 201
    _, secret = make_key(user, scopes=["keys"])
    by_key = Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert (
        by_key.post("/api/keys/", {"name": "y", "scopes": ["keys"]}, content_type="application/json").status_code == 201
    )


def test_plain_views_use_the_same_principal_rules(make_user, make_key):
    """request_principal/check_access serve the non-DRF /v1 views."""
    user = make_user()
    key, secret = make_key(user, scopes=["inference"], allowed_deployments=["tiny-llm"])
    factory = RequestFactory()
    request = factory.post("/v1/chat/completions", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert request_principal(request) == (user, key)
    check_access(user, key, "inference", "tiny-llm")
    with pytest.raises(AccessDenied) as outside:
        check_access(user, key, "inference", "sd3")
    assert outside.value.status == 403
    with pytest.raises(AccessDenied) as unscoped:
        check_access(user, key, "deployments:write")
    assert unscoped.value.status == 403
    with pytest.raises(AccessDenied) as bad:
        request_principal(factory.get("/v1/models", HTTP_AUTHORIZATION="Bearer omni-nope"))
    assert bad.value.status == 401

    session_post = factory.post("/v1/chat/completions")
    session_post.user = user
    session_post._dont_enforce_csrf_checks = False
    with pytest.raises(AccessDenied, match="CSRF"):
        request_principal(session_post)
    session_get = factory.get("/v1/models")
    session_get.user = user
    assert request_principal(session_get) == (user, None)


def test_session_scopes_and_admin_only_for_staff(make_user, make_key):
    user, staff = make_user(), make_user(staff=True)
    assert "admin" not in principal_scopes(user, None)
    assert "admin" in principal_scopes(staff, None)
    key, _ = make_key(staff, scopes=["admin"])
    assert "inference" in principal_scopes(staff, key)  # admin implies every scope
    staff.is_staff = False
    assert principal_scopes(staff, key) == frozenset()  # an admin key dies with its user's staff status


def test_secrets_never_reach_the_database_or_the_logs(make_user, caplog, settings):
    """Create keys through every path, use them, fail with them; then scan every row of every
    table and every captured log line for the secrets."""
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="django")  # Django's own default is INFO
    connection.force_debug_cursor = True  # log every SQL statement with its parameters
    try:
        user = make_user()
        staff = make_user(superuser=True)
        secrets = []
        created = session(user).post("/api/keys/", {"name": "api"}, content_type="application/json")
        secrets.append(created.json()["key"])
        admin_client = session(staff)
        page = admin_client.post(
            "/admin/accounts/apikey/add/",
            {"user": user.pk, "name": "from-admin", "scopes": ["inference"], "allowed_deployments": ""},
        )
        assert page.status_code == 200 and "no-store" in page["Cache-Control"]
        admin_key = ApiKey.objects.get(name="from-admin")
        secret_from_page = (
            page.content.decode().split('id="api-key-secret" readonly size="70" value="')[1].split('"')[0]
        )
        assert secret_from_page.startswith(f"omni-{admin_key.prefix}-")
        secrets.append(secret_from_page)
        assert (
            admin_client.get(f"/admin/accounts/apikey/{admin_key.pk}/change/").content.decode().count(secret_from_page)
            == 0
        )
        for secret in secrets:
            assert bearer(secret).get("/api/quota/").status_code == 200
            api_key_revoke(key=ApiKey.objects.get(prefix=key_format.prefix_of(secret)))
            assert bearer(secret).get("/api/quota/").status_code == 401
    finally:
        connection.force_debug_cursor = False

    assert any("SELECT" in record.getMessage() for record in caplog.records), "SQL was not captured"
    logged = "\n".join(record.getMessage() for record in caplog.records)
    for secret in secrets:
        random_part = secret.split("-", 2)[2]  # omni-<prefix>-<random>
        assert secret not in logged and random_part not in logged
        for table, text in every_table_as_text():
            assert random_part not in text, f"a key secret is stored in clear in {table}"


def every_table_as_text():
    """Every row of every table of the test database (sessions and admin log included), as text."""
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            yield table, " ".join(str(value) for row in cursor.fetchall() for value in row)
