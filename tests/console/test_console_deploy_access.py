"""Who deploys and who changes a deployment in the console: every signed-in user deploys from the
catalog (as their API keys may: `deployments:write` is a default scope); scaling, stopping,
starting and deleting are for the deployment's creator and for admins."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from control_plane.deployments.models import Deployment

pytestmark = pytest.mark.django_db


def _deploy_post(name: str) -> dict:
    return {"name": name, "model_dir": "-", "max_queue": "64", "request_timeout_s": "300",
            "stages.echo.pool": "cpu", "stages.echo.replicas": "1", "stages.echo.device": "cpu",
            "stages.echo.backend": "echo", "stages.echo.max_batch": "8", "stages.echo.max_length": "4096",
            "stages.echo.dtype": "float32", "stages.echo.async_chunk_size": "8", "stages.echo.options": "{}",
            "stages.echo.sampling": "{}"}  # fmt: skip


def _signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_plain_user_deploys_from_the_catalog_and_manages_only_their_own(alice, bob, pipelines):
    alice_client, bob_client = _signed_in(alice), _signed_in(bob)
    catalog = alice_client.get(reverse("console:catalog")).content.decode()
    assert "/catalog/qwen2_5_omni/deploy/" in catalog
    assert alice_client.get(reverse("console:deploy", args=["echo"])).status_code == 200
    response = alice_client.post(reverse("console:deploy", args=["echo"]), _deploy_post("alices"))
    assert response.status_code == 302 and response["Location"] == reverse("console:deployment", args=["alices"])
    assert Deployment.objects.get(name="alices").created_by == alice

    page = alice_client.get(reverse("console:deployment", args=["alices"])).content.decode()
    assert 'id="scale-form"' in page and "/deployments/alices/stop/" in page
    others = bob_client.get(reverse("console:deployment", args=["alices"])).content.decode()
    assert 'id="scale-form"' not in others and "/deployments/alices/stop/" not in others

    for view, data in (("console:deployment-scale", {"stage": "echo", "replicas": "2"}),
                       ("console:deployment-stop", {}), ("console:deployment-start", {}),
                       ("console:deployment-delete", {})):  # fmt: skip
        refused = bob_client.post(reverse(view, args=["alices"]), data)
        assert refused.status_code == 403 and 'data-error-page="403"' in refused.content.decode()
    assert Deployment.objects.get(name="alices").replicas.count() == 1

    alice_client.post(reverse("console:deployment-scale", args=["alices"]), {"stage": "echo", "replicas": "2"})
    assert Deployment.objects.get(name="alices").replicas.count() == 2
    alice_client.post(reverse("console:deployment-stop", args=["alices"]))
    assert Deployment.objects.get(name="alices").desired_state == "STOPPED"
    alice_client.post(reverse("console:deployment-delete", args=["alices"]))
    assert not Deployment.objects.filter(name="alices").exists()


def test_an_admin_manages_a_deployment_someone_else_created(alice, root, pipelines):
    _signed_in(alice).post(reverse("console:deploy", args=["echo"]), _deploy_post("alices"))
    root_client = _signed_in(root)
    page = root_client.get(reverse("console:deployment", args=["alices"])).content.decode()
    assert "/deployments/alices/stop/" in page
    root_client.post(reverse("console:deployment-stop", args=["alices"]))
    assert Deployment.objects.get(name="alices").desired_state == "STOPPED"


def test_managing_a_missing_deployment_is_a_404(alice_client):
    assert alice_client.post(reverse("console:deployment-stop", args=["gone"])).status_code == 404
