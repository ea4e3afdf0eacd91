"""The REST schema says what GET /api/requests/ answers (a limit/offset page) and takes, and
the view refuses what the schema does not allow instead of ignoring it; the schema itself is
public whatever credentials come along."""

from __future__ import annotations

import pytest
import yaml
from rest_framework.test import APIClient

from control_plane.accounts.services import api_key_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def schema() -> dict:
    response = APIClient().get("/api/schema/")
    assert response.status_code == 200
    return yaml.safe_load(response.content)


@pytest.fixture
def client(django_user_model):
    user = django_user_model.objects.create_user("reader", password="x")
    _, secret = api_key_create(user=user, name="k", scopes=["inference"])
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return api


def resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def test_the_request_list_is_documented_as_a_page_with_limit_and_offset(schema, client):
    operation = schema["paths"]["/api/requests/"]["get"]
    body = resolve(schema, operation["responses"]["200"]["content"]["application/json"]["schema"])
    assert body["type"] == "object" and {"count", "next", "previous", "results"} <= set(body["properties"])
    assert body["properties"]["results"]["type"] == "array"
    parameters = {p["name"]: p for p in operation["parameters"]}
    assert {"limit", "offset", "since", "until", "user"} <= set(parameters)
    assert parameters["limit"]["schema"]["maximum"] == 500 and parameters["offset"]["schema"]["minimum"] == 0
    assert "YYYY-MM-DD" in parameters["since"]["description"]

    page = client.get("/api/requests/", {"limit": 5, "offset": 0}).json()
    assert set(page) == set(body["properties"])


@pytest.mark.parametrize(
    "query",
    [{"until": ""}, {"user": ""}, {"since": ""}, {"since": "0"}, {"limit": "0"}, {"limit": "501"}, {"offset": "-1"},
     {"limit": "x"}, {"limit": str(2**80)}],
)  # fmt: skip
def test_parameters_outside_the_schema_are_refused(client, query):
    response = client.get("/api/requests/", query)
    assert response.status_code == 400, (query, response.content)
    assert set(query) <= set(response.json())


def test_the_schema_is_public_whatever_the_credentials():
    for header in ({}, {"HTTP_AUTHORIZATION": "Bearer omni-bad-key"}, {"HTTP_AUTHORIZATION": "Basic eA=="}):
        assert APIClient().get("/api/schema/", **header).status_code == 200, header
        assert APIClient().get("/api/docs/", **header).status_code == 200, header
