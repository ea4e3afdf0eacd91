"""Schemathesis over the REST API's own schema (/api/schema/): generated requests to every
operation, as an admin with every scope, answered by the Django application in process. No
answer may be a server error, and every answer must conform to what the schema documents
(status code, content type, body). Bounded: a few examples per operation, derandomized, and
destructive methods (DELETE) left out so the run does not depend on the order it picks."""

from __future__ import annotations

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings

from control_plane.accounts.permissions import ALL_SCOPES
from control_plane.accounts.services import api_key_create

pytestmark = pytest.mark.django_db

CHECKS = [
    schemathesis.checks.not_a_server_error,
    schemathesis.checks.status_code_conformance,
    schemathesis.checks.content_type_conformance,
    schemathesis.checks.response_schema_conformance,
]
EXAMPLES_PER_OPERATION = 8


@pytest.fixture
def application():
    """The application answers in the test's transaction: as Django's test client does, requests
    do not close the database connection when they end."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield get_wsgi_application()
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@pytest.fixture
def admin_headers(django_user_model) -> dict[str, str]:
    user = django_user_model.objects.create_superuser("fuzz-admin", password="x")
    _, secret = api_key_create(user=user, name="fuzz", scopes=sorted(ALL_SCOPES))
    return {"Authorization": f"Bearer {secret}"}


def test_every_rest_operation_answers_as_documented(application, admin_headers):
    schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application).exclude(method="DELETE")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10, [operation.label for operation in operations]
    failures = {}
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        def answers_as_documented(case):
            case.call_and_validate(headers=admin_headers, checks=CHECKS)

        try:
            answers_as_documented()
        except (Exception, BaseExceptionGroup) as failure:  # every operation is tried, then all failures shown
            failures[operation.label] = str(failure)[:1500]
    assert not failures, "\n\n".join(f"{label}:\n{text}" for label, text in failures.items())
