"""GET /metrics is for a scraper with the bearer token OMNISTAGE_METRICS_TOKEN or a staff
session: anyone else gets 401 (no credentials) or 403, and never the series."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

TOKEN = "scrape-token-123"


@pytest.fixture(autouse=True)
def metrics_token(settings):
    settings.METRICS_TOKEN = TOKEN


def signed_in(django_user_model, *, staff: bool) -> Client:
    user = django_user_model.objects.create_user("staff" if staff else "plain", password="x", is_staff=staff)
    client = Client()
    client.force_login(user)
    return client


def test_the_scrape_token_and_staff_sessions_read_the_metrics(django_user_model):
    scraped = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert scraped.status_code == 200 and b"omnistage_" in scraped.content
    staff = signed_in(django_user_model, staff=True).get("/metrics")
    assert staff.status_code == 200 and b"omnistage_" in staff.content


def test_everyone_else_is_refused(django_user_model):
    anonymous = Client().get("/metrics")
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"].startswith("Bearer")
    for header in (f"Bearer {TOKEN}x", "Bearer ", f"Basic {TOKEN}", "Bearer omni-a-b"):
        response = Client().get("/metrics", HTTP_AUTHORIZATION=header)
        assert response.status_code == 403, header
        assert b"omnistage_" not in response.content
    plain = signed_in(django_user_model, staff=False).get("/metrics")
    assert plain.status_code == 403 and b"omnistage_" not in plain.content


def test_without_a_configured_token_no_bearer_is_accepted(settings):
    settings.METRICS_TOKEN = ""
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 403
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer anything").status_code == 403
