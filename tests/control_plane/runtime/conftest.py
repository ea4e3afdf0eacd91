"""A live platform for runtime tests (tests/live_stack.py): a private redis-server (so a test can
restart it), a Celery worker pool, the orchestrator and daphne, all real processes."""

from __future__ import annotations

import time

import httpx
import pytest
from live_stack import LiveStack
from procs import wait_for
from reconciler_testing import Lifecycle

from control_plane.accounts.services import api_key_create
from control_plane.deployments.management.commands.sync_pipelines import discover_pipelines, pipeline_sync


@pytest.fixture(scope="session")
def pipeline_definitions():
    return discover_pipelines()


@pytest.fixture
def pipelines(transactional_db, pipeline_definitions):
    pipeline_sync(pipeline_definitions)


@pytest.fixture
def lifecycle(pipelines):
    """Deployments for driving the reconciler in-process (see reconciler_testing)."""
    helper = Lifecycle()
    yield helper
    helper.close()


@pytest.fixture
def operator(transactional_db, django_user_model):
    user = django_user_model.objects.create_user("operator", password="x", is_staff=True)
    _, secret = api_key_create(user=user, name="ops", scopes=["inference", "deployments:read", "deployments:write"])
    return user, secret


class Stack(LiveStack):
    """The platform without the history writer (no runtime test reads request history)."""

    def __init__(self, env: dict, tmp_path, secret: str):
        self.headers = {"Authorization": f"Bearer {secret}"}
        super().__init__(env, tmp_path, worker_node="rt", history=False)

    def api(self, method: str, path: str, **kwargs) -> httpx.Response:
        return httpx.request(method, f"{self.base}{path}", headers=self.headers, timeout=30, **kwargs)

    def deploy(self, name: str, pipeline: str, model_dir: str = "-", deploy_config: dict | None = None) -> dict:
        body = {"name": name, "pipeline": pipeline, "model_dir": model_dir, "deploy_config": deploy_config or {}}
        response = self.api("POST", "/api/deployments/", json=body)
        assert response.status_code == 201, response.text
        return response.json()

    def wait_state(self, name: str, state: str, timeout: float = 120) -> dict:
        def reached():
            body = self.api("GET", f"/api/deployments/{name}/").json()
            return body if body["state"] == state else None

        try:
            return wait_for(reached, timeout=timeout, interval=0.1, what=f"{name} {state}")
        except TimeoutError:
            print(self.api("GET", f"/api/deployments/{name}/").json())
            print(self.logs())
            raise

    def logs(self) -> str:
        return super().logs(tail=4000)

    def stop(self) -> None:
        self.stop_processes()


@pytest.fixture
def stack(platform_env, tmp_path, pipelines, operator):
    env = {**platform_env, "OMNISTAGE_REPLICA_BACKOFF_BASE_S": "1", "OMNISTAGE_REQUEST_STREAM_TTL_S": "120"}
    live = Stack(env, tmp_path, operator[1])
    yield live
    # stop the replica hosts through their deployments, then the processes
    for deployment in live.api("GET", "/api/deployments/").json():
        live.api("POST", f"/api/deployments/{deployment['name']}/stop/")
    time.sleep(0.5)
    live.stop()
