"""The deployment pages' edit form and revision history through Django's test client: the form
shows the serving config, an unchanged submit is refused, a change is a revision with an audit
entry, a bad value lands on its field, rollback, and who may do what."""

from __future__ import annotations

import pytest
from django.urls import reverse

from control_plane.audit.models import Action, AuditEntry
from control_plane.deployments.models import Deployment, Pipeline, RevisionState
from control_plane.deployments.services import deployment_create

pytestmark = pytest.mark.django_db
FAST = {"stages": {"echo": {"options": {"delay_s": 0.01}}}}


@pytest.fixture
def deployment(pipelines, root):
    return deployment_create(
        name="edited", pipeline=Pipeline.objects.get(name="echo"), model_dir="-", deploy_config=FAST, user=root
    )


def form_data(root_client, **changes) -> dict:
    """The edit form as the page fills it in, with `changes` over it."""
    form = root_client.get(reverse("console:deployment-edit", args=["edited"])).context["form"]
    data = {name: form[name].value() for name in form.fields}
    return {name: "" if value is None else value for name, value in {**data, **changes}.items()}


def test_the_form_shows_the_serving_config_and_refuses_an_unchanged_submit(root_client, deployment):
    page = root_client.get(reverse("console:deployment-edit", args=["edited"]))
    assert page.status_code == 200
    assert page.context["form"]["stages.echo.options"].value() == '{"delay_s": 0.01}'
    unchanged = root_client.post(reverse("console:deployment-edit", args=["edited"]), form_data(root_client))
    assert unchanged.status_code == 400 and b"no change" in unchanged.content
    assert deployment.revisions.count() == 1


def test_a_change_is_a_revision_and_a_bad_value_lands_on_its_field(root_client, root, deployment):
    url = reverse("console:deployment-edit", args=["edited"])
    bad = root_client.post(url, form_data(root_client, **{"stages.echo.replicas": "0"}))
    assert bad.status_code == 400
    assert bad.context["form"].errors["stages.echo.replicas"] == ["must be at least 1"]
    assert deployment.revisions.count() == 1

    changed = root_client.post(url, form_data(root_client, **{"stages.echo.sampling": '{"max_tokens": 2}'}))
    assert changed.status_code == 302 and changed["Location"] == reverse("console:deployment", args=["edited"])
    revision = deployment.revisions.get(number=2)
    assert revision.diff == [{"path": "stages.echo.sampling.max_tokens", "old": None, "new": 2}]  # nothing else
    assert revision.created_by == root
    entry = AuditEntry.objects.get(action=Action.DEPLOYMENT_CHANGE)
    assert entry.channel == "console" and entry.details["revision"] == 2

    page = root_client.get(reverse("console:deployment", args=["edited"])).content.decode()
    assert 'data-revision="2"' in page and "stages.echo.sampling.max_tokens" in page
    assert "Roll back to 1" in page

    back = root_client.post(reverse("console:deployment-rollback", args=["edited"]), {"revision": "1"})
    assert back.status_code == 302
    third = deployment.revisions.get(number=3)
    assert third.rollback_of == 1 and third.state == RevisionState.ACTIVE  # not RUNNING: applied at once
    assert Deployment.objects.get(name="edited").deploy_config == deployment.revisions.get(number=1).config


def test_plain_users_see_the_history_but_cannot_edit(alice_client, deployment):
    page = alice_client.get(reverse("console:deployment", args=["edited"])).content.decode()
    assert 'data-revision="1"' in page and "Edit config" not in page and "Roll back" not in page
    assert alice_client.get(reverse("console:deployment-edit", args=["edited"])).status_code == 403
    rollback = alice_client.post(reverse("console:deployment-rollback", args=["edited"]), {"revision": "1"})
    assert rollback.status_code == 403
