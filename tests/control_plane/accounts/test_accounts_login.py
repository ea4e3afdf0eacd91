"""Brute-force throttling of password logins: counted per (username, IP) and per IP in Redis."""

from __future__ import annotations

import pytest
from django.contrib.auth import authenticate
from django.test import Client, RequestFactory

from control_plane.accounts.login_throttle import login_blocked_for

PASSWORD = "correct horse battery"


def admin_login(client: Client, username: str, password: str):
    return client.post("/admin/login/?next=/admin/", {"username": username, "password": password})


def logged_in(response) -> bool:
    return response.status_code == 302 and response["Location"] == "/admin/"


@pytest.fixture
def staff(make_user):
    return make_user("operator", superuser=True, password=PASSWORD)


def test_admin_login_is_throttled_after_repeated_failures(staff, settings):
    settings.ACCOUNTS_LOGIN_MAX_FAILURES = 3
    client = Client(REMOTE_ADDR="203.0.113.7")
    for _ in range(3):
        response = admin_login(client, "operator", "wrong")
        assert response.status_code == 200 and not logged_in(response)
    refused = admin_login(client, "operator", PASSWORD)  # right password, too late
    assert not logged_in(refused)
    assert "Too many failed login attempts" in refused.content.decode()
    assert "_auth_user_id" not in client.session
    assert 0 < login_blocked_for("operator", "203.0.113.7") <= 900

    elsewhere = Client(REMOTE_ADDR="198.51.100.9")  # the same user from another address is not blocked
    assert logged_in(admin_login(elsewhere, "operator", PASSWORD))


def test_a_successful_login_clears_the_failures(staff, settings):
    settings.ACCOUNTS_LOGIN_MAX_FAILURES = 3
    client = Client(REMOTE_ADDR="203.0.113.8")
    for _ in range(2):
        admin_login(client, "operator", "wrong")
    assert logged_in(admin_login(client, "operator", PASSWORD))
    client.logout()
    for _ in range(2):
        admin_login(client, "operator", "wrong")
    assert logged_in(admin_login(client, "operator", PASSWORD))


def test_one_address_spraying_many_usernames_is_throttled(staff, settings):
    settings.ACCOUNTS_LOGIN_MAX_FAILURES_PER_IP = 5
    client = Client(REMOTE_ADDR="203.0.113.9")
    for i in range(5):
        admin_login(client, f"guess{i}", "wrong")
    assert not logged_in(admin_login(client, "operator", PASSWORD))


def test_the_backend_refuses_throttled_logins_on_every_path(staff, settings):
    settings.AUTHENTICATION_BACKENDS = ["control_plane.accounts.backends.ThrottledModelBackend"]
    settings.ACCOUNTS_LOGIN_MAX_FAILURES = 2
    request = RequestFactory().post("/console/login/", REMOTE_ADDR="203.0.113.10")
    assert authenticate(request, username="operator", password=PASSWORD) == staff
    assert authenticate(request, username="operator", password="wrong") is None
    assert authenticate(request, username="operator", password="wrong") is None
    assert authenticate(request, username="operator", password=PASSWORD) is None


def test_logins_are_not_throttled_when_redis_is_down(staff, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/9"
    settings.ACCOUNTS_LOGIN_MAX_FAILURES = 1
    client = Client(REMOTE_ADDR="203.0.113.11")
    admin_login(client, "operator", "wrong")
    assert logged_in(admin_login(client, "operator", PASSWORD))
