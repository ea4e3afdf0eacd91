"""Usage accounting: one record per request, summed per group over a date range, as JSON or CSV."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime

import pytest
from accounts_helpers import bearer, session

from control_plane.accounts.models import UsageRecord
from control_plane.accounts.usage import usage_record


def at(day: int, hour: int = 12) -> datetime:
    return datetime(2026, 11, day, hour, tzinfo=UTC)


@pytest.fixture
def history(make_user, make_key):
    """Two users; alice has two keys. Records on Nov 1, 2 and 3."""
    alice, bob = make_user("alice"), make_user("bob")
    key_a, secret_a = make_key(alice, name="a")
    key_b, secret_b = make_key(alice, name="b", allowed_deployments=["omni"])
    rows = [
        ("r1", alice, key_a, "tiny-llm", "text", at(1), {"text_tokens_in": 10, "text_tokens_out": 20}),
        ("r2", alice, key_a, "tiny-llm", "text", at(2), {"text_tokens_in": 5, "text_tokens_out": 7}),
        ("r3", alice, key_b, "omni", "audio", at(2), {"text_tokens_in": 3, "audio_seconds_out": 2.5}),
        ("r4", alice, None, "sd3", "image", at(3), {"images": 4}),
        ("r5", bob, None, "tiny-llm", "text", at(2), {"text_tokens_in": 100, "text_tokens_out": 100}),
    ]
    for request_id, user, key, deployment, modality, created, amounts in rows:
        record = usage_record(
            request_id=request_id, user=user, api_key=key, deployment=deployment, modality=modality, **amounts
        )
        UsageRecord.objects.filter(pk=record.pk).update(created_at=created)
    return {"alice": alice, "bob": bob, "key_a": key_a, "secret_a": secret_a, "key_b": key_b, "secret_b": secret_b}


RANGE = {"start": "2026-11-01", "end": "2026-11-03"}


def test_recording_is_idempotent_by_request_id(make_user):
    user = make_user()
    first = usage_record(request_id="same", user=user, modality="text", text_tokens_in=3)
    again = usage_record(request_id="same", user=user, modality="text", text_tokens_in=3)
    assert first.pk == again.pk and UsageRecord.objects.count() == 1


def test_recording_rejects_unknown_modalities_and_negative_amounts(make_user):
    user = make_user()
    with pytest.raises(ValueError, match="modality"):
        usage_record(request_id="x", user=user, modality="smell")
    with pytest.raises(ValueError, match=">= 0"):
        usage_record(request_id="y", user=user, modality="text", images=-1)


def test_own_usage_grouped_by_day_and_modality(history):
    response = session(history["alice"]).get("/api/usage/", {**RANGE, "group_by": "day,modality"})
    assert response.status_code == 200, response.content
    body = response.json()
    rows = [(row["day"], row["modality"], row["requests"]) for row in body["rows"]]
    assert rows == [
        ("2026-11-01", "text", 1),
        ("2026-11-02", "audio", 1),
        ("2026-11-02", "text", 1),
        ("2026-11-03", "image", 1),
    ]
    totals = body["totals"]
    assert totals["requests"] == 4  # bob's row is not alice's usage
    assert totals["text_tokens_in"] == 18 and totals["text_tokens_out"] == 27
    assert totals["audio_seconds_out"] == 2.5 and totals["images"] == 4


def test_date_range_is_half_open_and_end_dates_are_inclusive_days(history):
    client = session(history["alice"])
    one_day = client.get("/api/usage/", {"start": "2026-11-02", "end": "2026-11-02"}).json()["totals"]
    assert one_day["requests"] == 2
    instant = client.get("/api/usage/", {"start": "2026-11-02T00:00:00Z", "end": "2026-11-02T12:00:00Z"}).json()
    assert instant["totals"]["requests"] == 0


def test_grouping_by_user_key_and_deployment(history):
    response = session(history["alice"]).get("/api/usage/", {**RANGE, "group_by": "key,deployment"})
    rows = {(row["key_prefix"], row["deployment"]): row["requests"] for row in response.json()["rows"]}
    assert rows == {
        (history["key_a"].prefix, "tiny-llm"): 2,
        (history["key_b"].prefix, "omni"): 1,
        (None, "sd3"): 1,
    }


def test_bad_parameters_are_400_naming_the_field(history):
    client = session(history["alice"])
    assert "group_by" in client.get("/api/usage/", {"group_by": "colour"}).json()
    assert "start" in client.get("/api/usage/", {"start": "yesterday"}).json()
    assert "start" in client.get("/api/usage/", {"start": "2026-11-03", "end": "2026-11-01"}).json()


def test_only_admins_see_other_users(history, make_user):
    alice_client = session(history["alice"])
    assert alice_client.get("/api/usage/", {**RANGE, "user": "all"}).status_code == 403
    assert alice_client.get("/api/usage/", {**RANGE, "user": history["bob"].pk}).status_code == 403
    admin = session(make_user(staff=True))
    everyone = admin.get("/api/usage/", {**RANGE, "user": "all", "group_by": "user"}).json()
    assert {row["username"]: row["requests"] for row in everyone["rows"]} == {"alice": 4, "bob": 1}
    bob_only = admin.get("/api/usage/", {**RANGE, "user": history["bob"].pk}).json()
    assert bob_only["totals"]["text_tokens_in"] == 100


def test_a_key_with_an_allow_list_sees_only_its_deployments(history):
    client = bearer(history["secret_b"])
    body = client.get("/api/usage/", {**RANGE, "group_by": "deployment"}).json()
    assert [row["deployment"] for row in body["rows"]] == ["omni"]
    assert client.get("/api/usage/", {**RANGE, "deployment": "tiny-llm"}).status_code == 403
    assert client.get("/api/usage/", {**RANGE, "deployment": "omni"}).status_code == 200


def read_csv(response) -> list[dict]:
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def test_csv_export_by_format_parameter_and_by_path(history):
    client = bearer(history["secret_a"])
    by_format = client.get("/api/usage/", {**RANGE, "group_by": "deployment", "format": "csv"})
    assert by_format.status_code == 200 and by_format["Content-Type"].startswith("text/csv")
    rows = read_csv(by_format)
    assert {row["deployment"]: row["requests"] for row in rows} == {"omni": "1", "sd3": "1", "tiny-llm": "2"}
    assert rows[0]["audio_seconds_out"] == "2.5"
    export = client.get("/api/usage/export.csv", {**RANGE, "group_by": "deployment"}, HTTP_ACCEPT="application/json")
    assert export.status_code == 200 and 'filename="usage.csv"' in export["Content-Disposition"]
    assert read_csv(export) == rows
    totals = read_csv(client.get("/api/usage/export.csv", RANGE))
    assert totals == [{**{name: totals[0][name] for name in totals[0]}, "requests": "4"}]


def test_csv_cells_cannot_become_spreadsheet_formulas(make_user):
    user = make_user()
    usage_record(request_id="r", user=user, deployment="=HYPERLINK(1)", modality="text")
    rows = read_csv(session(user).get("/api/usage/export.csv", {"group_by": "deployment"}))
    assert rows[0]["deployment"] == "'=HYPERLINK(1)"


def test_usage_is_recorded_even_when_the_quota_store_is_down(make_user, settings):
    from control_plane.accounts.models import Quota
    from control_plane.accounts.quota import quota_admit

    user = make_user()
    Quota.objects.create(user=user, metric="text_tokens", window="day", limit=100)
    admission = quota_admit(user=user, estimate={"text_tokens": 10})
    settings.REDIS_URL = "redis://127.0.0.1:1/9"
    record = usage_record(request_id="r", user=user, modality="text", admission=admission, text_tokens_out=4)
    assert UsageRecord.objects.get(pk=record.pk).text_tokens_out == 4
