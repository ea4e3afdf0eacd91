"""A live platform for the realtime tests (tests/live_stack.py), started once and shared by them
all: a private redis-server, a real Celery worker pool, the orchestrator, the history writer and
daphne; an `echo-voice` deployment; API keys; a spoken WAV made by espeak-ng, at 24 kHz 16-bit
mono (the tiny Qwen2.5-Omni checkpoint, `tiny_omni`, is the whole run's: tests/conftest.py)."""

from __future__ import annotations

import shutil
import subprocess
import wave

import numpy as np
import pytest
from live_stack import KeyedStack, SharedStack, serving_env
from procs import unavailable, wait_for

from control_plane.accounts.services import api_key_create
from control_plane.deployments.management.commands.sync_pipelines import discover_pipelines, pipeline_sync
from stages.resampling import resample

VOICE_OPTIONS = {"stages": {"echo": {"options": {"delay_s": 0.01}}, "voice": {"options": {"delay_s": 0.01}}}}


class RealtimeStack(KeyedStack):
    def __init__(self, env: dict, tmp_path):
        super().__init__(env, tmp_path, worker_node="realtime")

    def deploy(self, name: str, pipeline: str, deploy_config: dict | None = None, model_dir: str = "-") -> None:
        body = {"name": name, "pipeline": pipeline, "model_dir": model_dir, "deploy_config": deploy_config or {}}
        response = self.http("POST", "/api/deployments/", secret=self.operator_secret, json=body)
        assert response.status_code == 201, response.text

    def wait_running(self, *names: str, timeout: float = 180) -> None:
        for name in names:

            def running(name=name):
                body = self.http("GET", f"/api/deployments/{name}/", secret=self.operator_secret).json()
                return body["state"] == "RUNNING"

            wait_for(running, timeout=timeout, interval=0.1, what=f"{name} RUNNING")

    def ws_url(self, model: str) -> str:
        return f"{self.ws_base}/v1/realtime?model={model}"


@pytest.fixture
def realtime_users(transactional_db, django_user_model):
    pipeline_sync(discover_pipelines())
    operator = django_user_model.objects.create_user("rt-operator", password="x", is_staff=True)
    _, operator_secret = api_key_create(
        user=operator, name="ops", scopes=["inference", "deployments:read", "deployments:write", "admin"]
    )
    user = django_user_model.objects.create_user("rt-user", password="x")
    _, user_secret = api_key_create(user=user, name="user", scopes=["inference"])
    return {"operator": (operator, operator_secret), "user": (user, user_secret)}


@pytest.fixture(scope="session")
def realtime_platform(django_db_setup, tmp_path_factory):
    """The realtime tests' processes, shared by consecutive tests (`realtime_stack`;
    tests/live_stack.py): each test's users, keys and deployments are its own. Stopped before the
    test database goes (hence django_db_setup)."""

    def start(platform_env: dict[str, str]) -> RealtimeStack:
        tmp = tmp_path_factory.mktemp("realtime-platform")
        return RealtimeStack(serving_env(platform_env, tmp), tmp)

    shared = SharedStack(start)
    yield shared
    shared.close()


@pytest.fixture
def realtime_stack(realtime_platform, platform_env, realtime_users, settings, request):
    live = realtime_platform.acquire(platform_env, request)
    live.use_keys(realtime_users["operator"][1], realtime_users["user"][1])
    settings.MEDIA_ROOT = live.tmp / "media"
    try:
        yield live
    finally:
        print(live.logs())  # shown by pytest only when the test failed
        realtime_platform.release()


@pytest.fixture
def voice_stack(realtime_stack):
    """The stack with an `echo-voice` deployment (text + audio) RUNNING."""
    realtime_stack.deploy("echo-voice", "echo-voice", VOICE_OPTIONS)
    realtime_stack.wait_running("echo-voice")
    return realtime_stack


@pytest.fixture(scope="session")
def spoken_hello(tmp_path_factory) -> np.ndarray:
    """'hello, how are you' spoken by espeak-ng, as float32 samples at 24 kHz."""
    if shutil.which("espeak-ng") is None:
        unavailable("espeak-ng is not installed (apt-get install -y espeak-ng)")
    path = tmp_path_factory.mktemp("speech") / "hello.wav"
    subprocess.run(["espeak-ng", "-w", str(path), "hello, how are you"], check=True, capture_output=True)
    with wave.open(str(path), "rb") as reader:
        rate = reader.getframerate()
        pcm = np.frombuffer(reader.readframes(reader.getnframes()), dtype="<i2")
    return resample(pcm.astype(np.float32) / 32768.0, rate, 24000)
