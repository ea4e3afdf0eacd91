"""A live platform for the /v1 tests (tests/live_stack.py): a private redis-server, a real
Celery worker pool, the orchestrator, the history writer and daphne on a free port; echo deployments
created through REST; API keys for an operator and for a plain user (the tiny Qwen2.5-Omni,
`tiny_omni`, is the whole run's: tests/conftest.py)."""

from __future__ import annotations

import pytest
from live_stack import KeyedStack, SharedStack, serving_env
from openai import OpenAI
from procs import wait_for

from control_plane.accounts.services import api_key_create
from control_plane.deployments.management.commands.sync_pipelines import discover_pipelines, pipeline_sync

ECHO_OPTIONS = {"stages": {"echo": {"options": {"delay_s": 0.01, "tokens_per_step": 1}}}}


@pytest.fixture(scope="session")
def serving_pipeline_definitions():
    return discover_pipelines()


class ServingStack(KeyedStack):
    def __init__(self, env: dict, tmp_path):
        super().__init__(env, tmp_path, worker_node="serving")

    def client(self, secret: str | None = None, **kwargs) -> OpenAI:
        kwargs.setdefault("max_retries", 0)
        kwargs.setdefault("timeout", 60)
        return OpenAI(base_url=f"{self.base}/v1", api_key=secret or self.user_secret, **kwargs)

    def deploy(self, name: str, pipeline: str, model_dir: str = "-", deploy_config: dict | None = None) -> dict:
        body = {"name": name, "pipeline": pipeline, "model_dir": model_dir, "deploy_config": deploy_config or {}}
        response = self.http("POST", "/api/deployments/", secret=self.operator_secret, json=body)
        assert response.status_code == 201, response.text
        return response.json()

    def wait_running(self, *names: str, timeout: float = 180) -> None:
        for name in names:

            def running(name=name):
                body = self.http("GET", f"/api/deployments/{name}/", secret=self.operator_secret).json()
                return body["state"] == "RUNNING"

            try:
                wait_for(running, timeout=timeout, interval=0.1, what=f"{name} RUNNING")
            except TimeoutError:
                print(self.logs())
                raise


@pytest.fixture
def serving_users(transactional_db, django_user_model, serving_pipeline_definitions):
    pipeline_sync(serving_pipeline_definitions)
    operator = django_user_model.objects.create_user("serving-operator", password="x", is_staff=True)
    _, operator_secret = api_key_create(
        user=operator, name="ops", scopes=["inference", "deployments:read", "deployments:write", "admin"]
    )
    user = django_user_model.objects.create_user("serving-user", password="x")
    _, user_secret = api_key_create(user=user, name="user", scopes=["inference"])
    return {"operator": (operator, operator_secret), "user": (user, user_secret)}


@pytest.fixture(scope="session")
def serving_platform(django_db_setup, tmp_path_factory):
    """The /v1 tests' processes, shared by them (`serving_stack`): each test's users, keys and
    deployments are its own; a test that stops a process starts it again, and a module that
    overrides `platform_env` gets a stack of its own environment. Stopped before the test database
    goes (hence django_db_setup)."""

    def start(platform_env: dict[str, str]) -> ServingStack:
        tmp = tmp_path_factory.mktemp("serving-platform")
        return ServingStack(serving_env(platform_env, tmp), tmp)

    shared = SharedStack(start)
    yield shared
    shared.close()


@pytest.fixture
def serving_stack(serving_platform, platform_env, serving_users, settings, request):
    live = serving_platform.acquire(platform_env, request)
    live.use_keys(serving_users["operator"][1], serving_users["user"][1])
    settings.MEDIA_ROOT = live.tmp / "media"  # the test reads the artifacts the live server wrote
    try:
        yield live
    finally:
        print(live.logs())  # shown by pytest only when the test failed
        serving_platform.release()


@pytest.fixture
def echo_stack(serving_stack):
    """The stack with `echo` (text) and `echo-voice` (text + audio) deployments RUNNING."""
    serving_stack.deploy("echo", "echo", deploy_config=ECHO_OPTIONS)
    voice = {"stages": {"echo": {"options": {"delay_s": 0.01}}, "voice": {"options": {"delay_s": 0.01}}}}
    serving_stack.deploy("echo-voice", "echo-voice", deploy_config=voice)
    serving_stack.wait_running("echo", "echo-voice")
    return serving_stack
