"""A live platform for runtime tests (tests/live_stack.py): a private redis-server (so a test can
restart it), a Celery worker pool, the orchestrator and daphne, all real processes."""

from __future__ import annotations

import httpx
import pytest
from live_stack import LiveStack, SharedStack
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
    """The platform without the history writer (no runtime test reads request history), driven with
    the operator key of the test using it (`use_key`)."""

    headers: dict[str, str] = {}

    def __init__(self, env: dict, tmp_path):
        super().__init__(env, tmp_path, worker_node="rt", history=False)

    def use_key(self, secret: str) -> None:
        self.headers = {"Authorization": f"Bearer {secret}"}

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

    def deployments(self) -> list[dict]:
        response = self.api("GET", "/api/deployments/")
        assert response.status_code == 200, response.text
        return response.json()

    def stop_deployment(self, name: str) -> None:
        self.api("POST", f"/api/deployments/{name}/stop/")

    def logs(self) -> str:
        return super().logs(tail=4000)


@pytest.fixture(scope="session")
def runtime_platform(django_db_setup, tmp_path_factory):
    """The runtime tests' processes, shared by them (`stack`): each test's operator and deployments are
    its own; a test that stops a process or Redis and leaves it stopped makes the next one start a
    fresh stack. Stopped before the test database goes (hence django_db_setup)."""

    def start(platform_env: dict[str, str]) -> Stack:
        env = {**platform_env, "OMNISTAGE_REPLICA_BACKOFF_BASE_S": "1", "OMNISTAGE_REQUEST_STREAM_TTL_S": "120"}
        return Stack(env, tmp_path_factory.mktemp("runtime-platform"))

    shared = SharedStack(start)
    yield shared
    shared.close()


@pytest.fixture
def stack(runtime_platform, platform_env, pipelines, operator, request):
    live = runtime_platform.acquire(platform_env, request)
    live.use_key(operator[1])
    try:
        yield live
    finally:
        runtime_platform.release()
