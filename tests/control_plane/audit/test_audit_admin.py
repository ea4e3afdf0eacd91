"""Changes made in Django's admin are audited too: keys, quotas (on their page, in the list, and
inline on a user's page) and deployments, with a from/to diff; invalid forms leave nothing."""

from __future__ import annotations

import pytest
from audit_helpers import only_entry, signed_in
from django.contrib.auth import get_user_model

from control_plane.accounts.models import ApiKey, Quota
from control_plane.accounts.services import api_key_create
from control_plane.audit.models import AuditEntry
from control_plane.deployments.models import Deployment, Pipeline
from control_plane.deployments.services import deployment_create

pytestmark = pytest.mark.django_db

ADMIN_IP = "203.0.113.50"
QUOTA_FORM = {"metric": "requests", "window": "day", "limit": "10", "is_active": "on", "api_key": ""}


def _fresh() -> None:
    AuditEntry.objects.all().delete()


def test_quota_changes_on_their_own_page(root, alice):
    admin = signed_in(root, ip=ADMIN_IP)
    assert admin.post("/admin/accounts/quota/add/", {**QUOTA_FORM, "user": alice.pk}).status_code == 302
    quota = Quota.objects.get(user=alice)
    entry = only_entry(actor=root, action="quota.create", target_kind="quota", client_ip=ADMIN_IP, channel="admin")
    assert (
        entry.details["limit"] == 10 and entry.details["metric"] == "requests" and "alice" in entry.details["subject"]
    )

    _fresh()
    changed = admin.post(f"/admin/accounts/quota/{quota.pk}/change/", {**QUOTA_FORM, "user": alice.pk, "limit": "25"})
    assert changed.status_code == 302
    entry = only_entry(action="quota.change", target_id=str(quota.pk))
    assert entry.details["changes"] == {"limit": {"from": 10, "to": 25}}

    _fresh()
    unchanged = admin.post(f"/admin/accounts/quota/{quota.pk}/change/", {**QUOTA_FORM, "user": alice.pk, "limit": "25"})
    assert unchanged.status_code == 302 and not AuditEntry.objects.exists()  # nothing changed, nothing to say
    invalid = admin.post("/admin/accounts/quota/add/", {**QUOTA_FORM, "user": alice.pk, "window": "none"})
    assert invalid.status_code == 200 and not AuditEntry.objects.exists()

    assert admin.post(f"/admin/accounts/quota/{quota.pk}/delete/", {"post": "yes"}).status_code == 302
    only_entry(action="quota.delete", target_kind="quota", actor=root)


def test_quota_changes_in_the_list_and_inline_on_the_user_page(root, alice):
    admin = signed_in(root, ip=ADMIN_IP)
    quota = Quota.objects.create(user=alice, metric="requests", window="day", limit=5)
    listed = admin.post(
        "/admin/accounts/quota/",
        {"form-TOTAL_FORMS": "1", "form-INITIAL_FORMS": "1", "form-0-id": quota.pk, "form-0-limit": "7",
         "form-0-is_active": "on", "_save": "Save"},
    )  # fmt: skip
    assert listed.status_code == 302
    entry = only_entry(action="quota.change", channel="admin")
    assert entry.details["changes"] == {"limit": {"from": 5, "to": 7}}

    _fresh()
    user_page = admin.get(f"/admin/auth/user/{alice.pk}/change/")
    form = user_page.context["adminform"].form
    data = {name: value for name, value in form.initial.items() if value is not None and name != "password"}
    data.update(
        {"date_joined_0": alice.date_joined.strftime("%Y-%m-%d"), "date_joined_1": alice.date_joined.strftime("%H:%M:%S"),
         "quotas-TOTAL_FORMS": "2", "quotas-INITIAL_FORMS": "1", "quotas-0-id": quota.pk, "quotas-0-user": alice.pk,
         "quotas-0-metric": "requests", "quotas-0-window": "day", "quotas-0-limit": "9", "quotas-0-is_active": "on",
         "quotas-1-user": alice.pk, "quotas-1-metric": "images", "quotas-1-window": "hour", "quotas-1-limit": "3",
         "quotas-1-is_active": "on", "api_keys-TOTAL_FORMS": "0", "api_keys-INITIAL_FORMS": "0"}
    )  # fmt: skip
    data.pop("groups", None), data.pop("user_permissions", None), data.pop("last_login", None)
    saved = admin.post(f"/admin/auth/user/{alice.pk}/change/", data)
    assert saved.status_code == 302, saved.context["adminform"].form.errors if saved.context else saved
    entries = {entry.action: entry for entry in AuditEntry.objects.all()}
    assert set(entries) == {"quota.change", "quota.create"}, list(entries)
    assert entries["quota.change"].details["changes"] == {"limit": {"from": 7, "to": 9}}
    assert entries["quota.create"].details["metric"] == "images" and entries["quota.create"].details["limit"] == 3
    assert {entry.channel for entry in entries.values()} == {"admin"}


def test_api_keys_created_and_revoked_in_the_admin(root, alice):
    admin = signed_in(root, ip=ADMIN_IP)
    page = admin.post("/admin/accounts/apikey/add/", {"user": alice.pk, "name": "alice's app", "scopes": ["inference"]})
    assert page.status_code == 200
    key = ApiKey.objects.get(name="alice's app")
    entry = only_entry(actor=root, action="api_key.create", target_id=str(key.pk), client_ip=ADMIN_IP, channel="admin")
    assert entry.details["owner"] == "alice" and entry.details["scopes"] == ["inference"]

    _fresh()
    other, _ = api_key_create(user=alice, name="other")
    revoked = admin.post(
        "/admin/accounts/apikey/", {"action": "revoke_keys", "_selected_action": [key.pk, other.pk], "index": "0"}
    )
    assert revoked.status_code == 302
    assert sorted(AuditEntry.objects.values_list("action", "target_id")) == sorted(
        [("api_key.revoke", str(key.pk)), ("api_key.revoke", str(other.pk))]
    )

    _fresh()
    assert admin.post("/admin/accounts/apikey/", {"action": "delete_selected", "_selected_action": [other.pk],
                                                  "post": "yes"}).status_code == 302  # fmt: skip
    only_entry(action="api_key.delete", target_id=str(other.pk))


def test_a_deployment_config_changed_in_the_admin(root, pipelines):
    deployment = deployment_create(
        name="dep", pipeline=Pipeline.objects.get(name="echo"), model_dir="-", deploy_config={}, user=root
    )
    admin = signed_in(root, ip=ADMIN_IP)
    form = admin.get(f"/admin/deployments/deployment/{deployment.pk}/change/").context["adminform"].form
    data = {name: value for name, value in form.initial.items() if value is not None}
    data.update({"deploy_config": '{"stages": {"echo": {"replicas": 2}}}', "pipeline": deployment.pipeline_id,
                 "created_by": root.pk, "replicas-TOTAL_FORMS": "0", "replicas-INITIAL_FORMS": "0"})  # fmt: skip
    for name in ("state_changed_at", "created_at"):
        moment = data.pop(name)
        data.update({f"{name}_0": moment.strftime("%Y-%m-%d"), f"{name}_1": moment.strftime("%H:%M:%S")})
    saved = admin.post(f"/admin/deployments/deployment/{deployment.pk}/change/", data)
    assert saved.status_code == 302, saved.context["adminform"].form.errors if saved.context else saved
    entry = only_entry(action="deployment.change", target_name="dep", channel="admin")
    assert entry.details["changes"]["deploy_config"]["to"] == {"stages": {"echo": {"replicas": 2}}}
    assert Deployment.objects.get(name="dep").deploy_config == {"stages": {"echo": {"replicas": 2}}}


def test_other_admin_changes_are_not_in_the_audit_log(root):
    admin = signed_in(root)
    created = admin.post(
        "/admin/auth/user/add/",
        {"username": "carol", "password1": "a-long-pass-phrase", "password2": "a-long-pass-phrase",
         "usable_password": "true"},
    )  # fmt: skip
    assert created.status_code == 302 and get_user_model().objects.filter(username="carol").exists()
    assert not AuditEntry.objects.exists()
