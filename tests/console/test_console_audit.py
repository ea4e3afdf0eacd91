"""The console's changes are audited like the API's (channel "console"), and its Audit page is for
admins only."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from control_plane.accounts.models import ApiKey
from control_plane.audit.models import AuditEntry
from control_plane.deployments.models import Deployment, DeploymentState, Pipeline, Replica
from control_plane.deployments.services import deployment_create

pytestmark = pytest.mark.django_db

CONSOLE_IP = "203.0.113.80"


def _client(user) -> Client:
    client = Client(REMOTE_ADDR=CONSOLE_IP)
    client.force_login(user)
    return client


def _only_entry(**expected) -> AuditEntry:
    entries = list(AuditEntry.objects.all())
    assert len(entries) == 1, [str(entry) for entry in entries]
    for field, value in expected.items():
        assert getattr(entries[0], field) == value, f"{field}: {getattr(entries[0], field)!r} != {value!r}"
    AuditEntry.objects.all().delete()
    return entries[0]


def _deploy_post(name: str, **overrides) -> dict:
    data = {"name": name, "model_dir": "-", "max_queue": "64", "request_timeout_s": "300"}
    data.update({
        "stages.echo.pool": "cpu", "stages.echo.replicas": "1", "stages.echo.device": "cpu",
        "stages.echo.backend": "echo", "stages.echo.max_batch": "16", "stages.echo.max_length": "2048",
        "stages.echo.dtype": "float32", "stages.echo.async_chunk_size": "25", "stages.echo.options": "{}",
    })  # fmt: skip
    data.update(overrides)
    return data


def test_each_deployment_change_in_the_console_leaves_one_entry(root, pipelines):
    client = _client(root)
    deployed = client.post(reverse("console:deploy", args=["echo"]), _deploy_post("dep"))
    assert deployed.status_code == 302
    entry = _only_entry(actor=root, action="deployment.create", target_name="dep", client_ip=CONSOLE_IP)
    assert entry.channel == "console" and entry.details["pipeline"] == "echo"
    assert entry.details["deploy_config"]["stages"]["echo"]["replicas"] == 1

    client.post(reverse("console:deployment-scale", args=["dep"]), {"stage": "echo", "replicas": "2"})
    entry = _only_entry(actor=root, action="deployment.scale", target_name="dep", channel="console")
    assert entry.details["stage"] == "echo" and entry.details["replicas"] == 2
    client.post(reverse("console:deployment-stop", args=["dep"]))
    _only_entry(action="deployment.stop", target_name="dep", client_ip=CONSOLE_IP)
    client.post(reverse("console:deployment-start", args=["dep"]))
    _only_entry(action="deployment.start", target_name="dep")
    Replica.objects.filter(deployment__name="dep").update(state=DeploymentState.STOPPED)  # no worker to tell
    client.post(reverse("console:deployment-delete", args=["dep"]))
    _only_entry(action="deployment.delete", target_name="dep", channel="console")


def test_refused_or_invalid_console_changes_leave_no_entry(root, alice, pipelines):
    client = _client(root)
    assert (
        client.post(
            reverse("console:deploy", args=["echo"]), _deploy_post("bad", **{"stages.echo.replicas": "0"})
        ).status_code
        == 400
    )
    deployment_create(name="dep", pipeline=Pipeline.objects.get(name="echo"), model_dir="-", deploy_config={})
    client.post(reverse("console:deployment-scale", args=["dep"]), {"stage": "nope", "replicas": "2"})
    client.post(reverse("console:deployment-scale", args=["dep"]), {"stage": "echo", "replicas": "many"})
    plain = _client(alice)
    assert plain.post(reverse("console:deployment-stop", args=["dep"])).status_code == 403
    assert plain.post(reverse("console:deployment-delete", args=["dep"])).status_code == 403
    assert plain.post(reverse("console:keys"), {"name": "", "scopes": ["inference"]}).status_code == 400
    assert not AuditEntry.objects.exists()
    assert Deployment.objects.get(name="dep").desired_state == "RUNNING"


def test_keys_created_and_revoked_in_the_console(alice):
    client = _client(alice)
    assert client.post(reverse("console:keys"), {"name": "laptop", "scopes": ["inference"]}).status_code == 200
    key = ApiKey.objects.get(name="laptop")
    entry = _only_entry(actor=alice, action="api_key.create", target_id=str(key.pk), channel="console")
    assert entry.client_ip == CONSOLE_IP and entry.details["scopes"] == ["inference"]
    client.post(reverse("console:key-revoke", args=[key.pk]))
    _only_entry(actor=alice, action="api_key.revoke", target_id=str(key.pk))


def test_the_audit_page_lists_and_filters_for_admins(root, alice, pipelines):
    admin = _client(root)
    admin.post(reverse("console:deploy", args=["echo"]), _deploy_post("first"))
    admin.post(reverse("console:deploy", args=["echo"]), _deploy_post("second"))
    admin.post(reverse("console:deployment-stop", args=["second"]))
    _client(alice).post(reverse("console:keys"), {"name": "laptop", "scopes": ["inference"]})

    page = admin.get(reverse("console:audit")).content.decode()
    assert page.count("data-audit=") == 4
    assert 'data-audit="deployment.stop"' in page and 'data-audit="api_key.create"' in page
    assert CONSOLE_IP in page and 'data-nav="audit"' in page
    page = admin.get(reverse("console:audit"), {"action": "deployment.stop"}).content.decode()
    assert page.count("data-audit=") == 1 and "second" in page
    page = admin.get(reverse("console:audit"), {"actor": "alice"}).content.decode()
    assert page.count("data-audit=") == 1 and 'data-audit="api_key.create"' in page
    page = admin.get(reverse("console:audit"), {"target": "first", "kind": "deployment"}).content.decode()
    assert page.count("data-audit=") == 1
    page = admin.get(reverse("console:audit"), {"until": "2000-01-01"}).content.decode()
    assert page.count("data-audit=") == 0 and "No entries match." in page


def test_the_audit_page_is_not_for_plain_users(root, alice, pipelines):
    _client(root).post(reverse("console:deploy", args=["echo"]), _deploy_post("dep"))
    plain = _client(alice)
    response = plain.get(reverse("console:audit"))
    assert response.status_code == 403 and b"deployment.create" not in response.content
    assert 'data-nav="audit"' not in plain.get(reverse("console:dashboard")).content.decode()
    anonymous = Client().get(reverse("console:audit"))
    assert anonymous.status_code == 302 and "login" in anonymous["Location"]
