"""The REST API's changes leave one audit entry each (who, when, what, from where); refused or failed
ones leave none; only admins read the log."""

from __future__ import annotations

from datetime import timedelta

import pytest
from audit_helpers import only_entry, replicas_stopped, signed_in, with_key
from django.test import Client
from django.utils import timezone

from control_plane.accounts.models import ApiKey
from control_plane.accounts.services import api_key_create
from control_plane.audit.models import AuditEntry
from control_plane.deployments import apis as deployment_apis
from control_plane.deployments.models import Deployment, Pipeline
from control_plane.deployments.services import deployment_create

pytestmark = pytest.mark.django_db

KEY_IP = "198.51.100.9"


def _create(client: Client, name: str = "dep", **body):
    body = {"name": name, "pipeline": "echo-voice", "model_dir": "-", **body}
    return client.post("/api/deployments/", body, content_type="application/json")


def test_each_deployment_change_leaves_one_entry_with_actor_ip_and_details(root, pipelines):
    client, key = with_key(root, ip=KEY_IP)
    config = {"stages": {"voice": {"replicas": 2}}}
    assert _create(client, deploy_config=config).status_code == 201
    entry = only_entry(actor=root, actor_name="root", api_key_prefix=key.prefix, action="deployment.create")
    assert (entry.target_kind, entry.target_name, entry.client_ip, entry.channel) == (
        "deployment",
        "dep",
        KEY_IP,
        "api",
    )
    assert entry.details["pipeline"] == "echo-voice" and entry.details["deploy_config"] == config
    assert entry.target_id == str(Deployment.objects.get(name="dep").pk)
    assert timezone.now() - entry.created_at < timedelta(minutes=1)

    steps = [
        ("scale/", {"stage": "voice", "replicas": 3}, "deployment.scale", {"stage": "voice", "replicas": 3}),
        ("stop/", None, "deployment.stop", {"desired_state": "STOPPED"}),
        ("start/", None, "deployment.start", {"desired_state": "RUNNING"}),
    ]
    for suffix, body, action, details in steps:
        AuditEntry.objects.all().delete()
        response = client.post(f"/api/deployments/dep/{suffix}", body or {}, content_type="application/json")
        assert response.status_code == 200, response.content
        entry = only_entry(actor=root, action=action, target_name="dep", client_ip=KEY_IP, channel="api")
        assert details.items() <= entry.details.items(), entry.details

    AuditEntry.objects.all().delete()
    replicas_stopped("dep")
    deployment_id = str(Deployment.objects.get(name="dep").pk)
    assert client.delete("/api/deployments/dep/").status_code == 204
    only_entry(actor=root, action="deployment.delete", target_id=deployment_id, target_name="dep", client_ip=KEY_IP)
    assert not Deployment.objects.filter(name="dep").exists()


def test_refused_and_failed_deployment_changes_leave_no_entry(root, alice, pipelines):
    client, _ = with_key(root)
    assert _create(client, pipeline="no-such-pipeline").status_code == 400
    assert _create(client, deploy_config={"stages": {"voice": {"replicas": 0}}}).status_code == 400
    deployment_create(name="dep", pipeline=Pipeline.objects.get(name="echo-voice"), model_dir="-", deploy_config={})
    assert _create(client).status_code == 400  # the name is taken
    scale = client.post(
        "/api/deployments/dep/scale/", {"stage": "nope", "replicas": 2}, content_type="application/json"
    )
    assert scale.status_code == 400
    plain_user = signed_in(alice)
    assert plain_user.post("/api/deployments/dep/stop/").status_code == 403
    assert plain_user.delete("/api/deployments/dep/").status_code == 403
    assert Client().post("/api/deployments/dep/stop/").status_code == 401
    assert not AuditEntry.objects.exists()
    assert Deployment.objects.get(name="dep").desired_state == "RUNNING"


def test_api_key_create_and_revoke_leave_one_entry_each(alice):
    client = signed_in(alice, ip="2001:db8::7")
    created = client.post("/api/keys/", {"name": "laptop", "scopes": ["inference"]}, content_type="application/json")
    assert created.status_code == 201
    key = ApiKey.objects.get(name="laptop")
    entry = only_entry(actor=alice, api_key_prefix="", action="api_key.create", target_kind="api_key")
    assert entry.client_ip == "2001:db8::7" and entry.channel == "api" and key.prefix in entry.target_name
    assert entry.details["scopes"] == ["inference"] and entry.details["owner"] == "alice"
    assert created.json()["key"] not in str(entry.details)  # never the secret

    AuditEntry.objects.all().delete()
    assert client.post(f"/api/keys/{key.pk}/revoke/").status_code == 200
    entry = only_entry(actor=alice, action="api_key.revoke", target_id=str(key.pk))
    assert entry.details["revoked_at"] is not None


def test_refused_key_changes_leave_no_entry(alice, root):
    client = signed_in(alice)
    assert (
        client.post("/api/keys/", {"name": "x", "scopes": ["admin"]}, content_type="application/json").status_code
        == 400
    )
    assert client.post("/api/keys/", {"name": " "}, content_type="application/json").status_code == 400
    roots_key, _ = api_key_create(user=root, name="root's")
    assert client.post(f"/api/keys/{roots_key.pk}/revoke/").status_code == 404
    assert not AuditEntry.objects.exists()
    assert ApiKey.objects.get(pk=roots_key.pk).is_active


def test_the_client_ip_is_remote_addr_not_a_forwarded_header(root, pipelines):
    client, _ = with_key(root, ip="192.0.2.10")
    response = client.post(
        "/api/deployments/",
        {"name": "dep", "pipeline": "echo", "model_dir": "-"},
        content_type="application/json",
        HTTP_X_FORWARDED_FOR="10.9.9.9",
    )
    assert response.status_code == 201
    only_entry(client_ip="192.0.2.10")


@pytest.mark.django_db(transaction=True)
def test_a_change_that_rolls_back_leaves_no_entry(root, pipelines, monkeypatch):
    """The entry is written in the change's transaction: a failure after it undoes both."""
    deployment_create(name="dep", pipeline=Pipeline.objects.get(name="echo"), model_dir="-", deploy_config={})
    client, _ = with_key(root)

    def broken_read(name):
        raise RuntimeError("the response could not be built")

    monkeypatch.setattr(deployment_apis.queries, "deployment_get", broken_read)
    with pytest.raises(RuntimeError):
        client.post("/api/deployments/dep/stop/")
    assert Deployment.objects.get(name="dep").desired_state == "RUNNING"
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_recording_outside_a_transaction_is_refused(root):
    from types import SimpleNamespace

    from control_plane.audit.services import AuditOutsideTransaction, audit_record

    request = SimpleNamespace(user=root, META={"REMOTE_ADDR": "127.0.0.1"}, path="/api/keys/")
    key, _ = api_key_create(user=root, name="k")
    with pytest.raises(AuditOutsideTransaction):
        audit_record(request, "api_key.revoke", key)
    assert not AuditEntry.objects.exists()


def test_admins_read_the_log_with_filters_and_pages(root, alice, pipelines):
    client, _ = with_key(root, ip=KEY_IP)
    for name in ("one", "two", "three"):
        assert _create(client, name).status_code == 201
    assert client.post("/api/deployments/two/stop/").status_code == 200
    signed_in(alice).post("/api/keys/", {"name": "laptop", "scopes": ["inference"]}, content_type="application/json")

    admin = signed_in(root)
    body = admin.get("/api/audit/").json()
    assert body["count"] == 5
    newest = body["results"][0]
    assert newest["action"] == "api_key.create" and newest["actor"] == "alice" and newest["actor_id"] == alice.pk
    assert {"created_at", "target_kind", "target_name", "details", "client_ip", "channel"} <= newest.keys()

    def names(**params):
        return [row["target_name"] for row in admin.get("/api/audit/", params).json()["results"]]

    assert names(action="deployment.stop") == ["two"]
    assert names(action="deployment.", target="two") == ["two", "two"]
    assert len(names(actor="alice")) == 1 and len(names(actor=str(root.pk))) == 4
    assert names(target_kind="deployment", limit=2) == ["two", "three"]
    assert names(target_kind="deployment", limit=2, offset=2) == ["two", "one"]
    today = timezone.now().date()
    assert len(names(since=today.isoformat(), until=today.isoformat())) == 5
    assert names(until=(today - timedelta(days=1)).isoformat()) == []
    assert admin.get("/api/audit/", {"since": "yesterday"}).status_code == 400


def test_only_admins_read_the_log(root, alice, pipelines):
    client, _ = with_key(root)
    assert _create(client).status_code == 201
    alice.is_staff = True
    alice.save()
    alices_every_scope, _ = with_key(alice)
    alice.is_staff = False  # a key's `admin` scope counts only while its user is staff
    alice.save()
    roots_without_admin, _ = with_key(root, scopes=["inference", "deployments:read", "deployments:write", "keys"])
    for caller, status in [
        (Client(), 401),
        (signed_in(alice), 403),
        (alices_every_scope, 403),
        (roots_without_admin, 403),
    ]:
        response = caller.get("/api/audit/")
        assert response.status_code == status
        assert "deployment.create" not in response.content.decode()
    assert client.get("/api/audit/").status_code == 200
    assert client.post("/api/audit/").status_code == 405


def test_the_log_is_in_the_schema():
    schema = Client().get("/api/schema/").content.decode()
    assert "/api/audit/:" in schema and "PaginatedAuditEntryList" in schema
