"""GET /v1/openapi.json describes every /v1 HTTP route, with request bodies that are valid JSON
Schemas of what the views parse."""

from __future__ import annotations

import re

import jsonschema
import pytest
from django.urls import URLPattern, URLResolver

from control_plane.openai_compat import urls

pytestmark = pytest.mark.django_db


def v1_paths(patterns, prefix="/v1/") -> set[str]:
    found = set()
    for pattern in patterns:
        route = str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            found |= v1_paths(pattern.url_patterns, prefix + route)
        elif isinstance(pattern, URLPattern) and not route.startswith("^"):  # the catch-all 404
            found.add(re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", prefix + route))
    return found


def test_every_v1_route_is_in_the_schema(client):
    response = client.get("/v1/openapi.json")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.1")
    assert v1_paths(urls.urlpatterns) - {"/v1/openapi.json"} == set(document["paths"])
    for name, schema in document["components"]["schemas"].items():
        jsonschema.Draft202012Validator.check_schema(schema), name

    responses = document["paths"]["/v1/responses"]["post"]
    body = document["components"]["schemas"]["ResponseRequest"]
    assert responses["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/ResponseRequest")
    assert set(body["required"]) == {"model", "input"} and "previous_response_id" in body["properties"]
    assert set(responses["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}
    transcription = document["paths"]["/v1/audio/transcriptions"]["post"]["requestBody"]["content"]
    assert transcription["multipart/form-data"]["schema"]["allOf"][1]["properties"]["file"]["format"] == "binary"
    assert {"get", "delete"} == set(document["paths"]["/v1/responses/{response_id}"])
    assert document["paths"]["/v1/audio/voices"]["get"]["parameters"][0]["name"] == "model"
