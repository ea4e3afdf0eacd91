"""Clients with a client IP (by session, by API key), and the one entry an action must leave."""

from __future__ import annotations

from django.test import Client

from control_plane.accounts.models import ApiKey
from control_plane.accounts.services import api_key_create
from control_plane.audit.models import AuditEntry
from control_plane.deployments.models import DeploymentState, Replica


def signed_in(user, *, ip: str = "203.0.113.7") -> Client:
    client = Client(REMOTE_ADDR=ip)
    client.force_login(user)
    return client


def with_key(user, *, ip: str = "198.51.100.9", scopes=None) -> tuple[Client, ApiKey]:
    key, secret = api_key_create(user=user, name="audit test", scopes=scopes or sorted(ApiKey.Scope.values))
    return Client(REMOTE_ADDR=ip, HTTP_AUTHORIZATION=f"Bearer {secret}"), key


def replicas_stopped(name: str) -> None:
    """Deleting a deployment asks the workers holding its live replicas to stop; these never started."""
    Replica.objects.filter(deployment__name=name).update(state=DeploymentState.STOPPED)


def only_entry(**expected) -> AuditEntry:
    """The one audit entry there is, checked against `expected` fields."""
    entries = list(AuditEntry.objects.all())
    assert len(entries) == 1, [str(entry) for entry in entries]
    entry = entries[0]
    for field, value in expected.items():
        assert getattr(entry, field) == value, f"{field}: {getattr(entry, field)!r} != {value!r}"
    return entry
