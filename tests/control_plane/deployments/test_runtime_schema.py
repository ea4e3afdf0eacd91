"""The OpenAPI schema at /api/schema/ describes the runtime's REST: pipelines, deployments
(create, scale, stop, start, delete) and replicas."""

from __future__ import annotations

import pytest
import yaml
from django.test import Client

pytestmark = pytest.mark.django_db

RUNTIME_OPERATIONS = {
    ("/api/pipelines/", "get"),
    ("/api/pipelines/{name}/", "get"),
    ("/api/deployments/", "get"),
    ("/api/deployments/", "post"),
    ("/api/deployments/{name}/", "get"),
    ("/api/deployments/{name}/", "delete"),
    ("/api/deployments/{name}/scale/", "post"),
    ("/api/deployments/{name}/stop/", "post"),
    ("/api/deployments/{name}/start/", "post"),
    ("/api/replicas/", "get"),
}


@pytest.fixture
def schema() -> dict:
    response = Client().get("/api/schema/")
    assert response.status_code == 200, response.content[:500]
    return yaml.safe_load(response.content)


def test_the_schema_has_every_runtime_operation(schema):
    operations = {(path, method) for path, item in schema["paths"].items() for method in item}
    assert RUNTIME_OPERATIONS <= operations, RUNTIME_OPERATIONS - operations


def test_the_schema_describes_deploy_configs_scaling_and_replica_states(schema):
    paths = schema["paths"]
    create = paths["/api/deployments/"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    scale = paths["/api/deployments/{name}/scale/"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    components = schema["components"]["schemas"]

    def fields(reference: dict) -> set[str]:
        return set(components[reference["$ref"].rsplit("/", 1)[1]]["properties"])

    assert {"name", "pipeline", "model_dir", "deploy_config"} <= fields(create)
    assert {"stage", "replicas"} <= fields(scale)
    assert {"state", "state_reason", "host", "restarts", "last_error", "transfers"} <= set(
        components["ReplicaOutput"]["properties"]
    )
    replicas = components["DeploymentOutput"]["properties"]["replicas"]
    assert replicas["items"]["$ref"].endswith("/ReplicaOutput")
