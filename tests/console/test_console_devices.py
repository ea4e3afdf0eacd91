"""The Devices page: every worker pool with its hosts and devices, their memory and utilisation,
and the replicas placed on each, from the heartbeats; in a real browser against a live platform,
and rendered in-process from heartbeat keys (a GPU host included, and a Redis that is down).
The deployment page names a loading replica's phase under its progress bar and, while its weights load,
the bytes read of their total; the REST replica rows carry both numbers."""

from __future__ import annotations

import json
import re
import shutil
import socket

import msgspec
import pytest
import redis
from console_browser import chromium_page, shot
from console_stack import ConsoleStack, wait_running
from django.urls import reverse
from procs import wait_for

from control_plane.deployments.apis import ReplicaOutput
from control_plane.deployments.models import Deployment, Pipeline
from control_plane.deployments.services import deployment_create
from stages import streams
from stages.protocol import ReplicaStatus
from stages.replica_stats import DeviceUsage

PASSWORD = "correct horse battery"
GIB = 1 << 30


@pytest.fixture
def browser(monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop
    with chromium_page() as page:
        yield page


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_devices_page_shows_the_replicas_host_device_and_memory(console_stack, root, browser):
    base, page = console_stack.base, browser
    deployment_create(name="dev-echo", pipeline=Pipeline.objects.get(name="echo"), model_dir="-", deploy_config={})
    wait_running("dev-echo", console_stack)
    page.goto(f"{base}/login/")
    page.fill("#id_username", "root")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("h1:text('Dashboard')")

    page.click(".sidebar [data-nav='devices']")
    page.wait_for_selector("h1:text('Devices')")
    host = socket.gethostname()
    row = page.locator(f"[data-pool='cpu'] [data-device='{host}/cpu']")
    row.locator("[data-placed='dev-echo/echo-0']").wait_for()
    assert host in row.locator("[data-host]").text_content()
    memory = row.locator("[data-memory]").text_content()
    assert re.search(r"\d+(\.\d+)?\s[KMGT]B\s/\s\d+(\.\d+)?\s[KMGT]B", memory), memory
    assert row.locator("[data-memory] .progress").count() == 1
    placed = row.locator("[data-placed='dev-echo/echo-0']").text_content()
    assert "RUNNING" in placed and re.search(r"\d+(\.\d+)?\s[KM]B", placed), placed  # the host process's RSS
    wait_for(lambda: "%" in row.locator("[data-utilization]").text_content(), timeout=30, what="a CPU share")
    shot(page, "devices")
    page.click("[data-placed='dev-echo/echo-0'] a")
    page.wait_for_selector("h1:text('dev-echo')")
    assert page.errors == []


def beat(client: redis.Redis, key: str, body: dict) -> None:
    client.set(key, json.dumps(body), ex=60)


@pytest.mark.django_db
def test_a_gpu_host_and_its_replica_from_heartbeats(alice_client, pipelines, settings):
    settings.KNOWN_POOLS = [*settings.KNOWN_POOLS, "gpu.h200"]
    client = redis.Redis.from_url(settings.REDIS_URL)
    pool_key = streams.pool_heartbeat("gpu.h200", "w1@gpu-host-7")
    usage = [{"device": "cpu", "memory_used_bytes": 3 * GIB, "memory_total_bytes": 64 * GIB},
             {"device": "cuda:0", "memory_used_bytes": 1 * GIB, "memory_total_bytes": 80 * GIB, "utilization": 0.0},
             {"device": "cuda:1", "memory_used_bytes": 2 * GIB, "memory_total_bytes": 80 * GIB, "utilization": 0.1}]  # fmt: skip
    beat(client, pool_key, {"pool": "gpu.h200", "hostname": "w1@gpu-host-7", "host": "gpu-host-7",
                            "devices": ["cpu", "cuda:0", "cuda:1"], "usage": usage})  # fmt: skip
    deployment = deployment_create(name="gpu-llm", pipeline=Pipeline.objects.get(name="echo"), model_dir="-",
                                   deploy_config={"stages": {"echo": {"pool": "gpu.h200", "device": "cuda:1"}}})  # fmt: skip
    replica = deployment.replicas.get()
    status = ReplicaStatus(replica_id=str(replica.id), deployment_id=str(deployment.id), stage="echo", state="READY",
                           host="gpu-host-7", pid=1, device="cuda:1",
                           device_usage=DeviceUsage(device="cuda:1", memory_used_bytes=40 * GIB,
                                                    memory_total_bytes=80 * GIB, process_bytes=30 * GIB,
                                                    utilization=0.75))  # fmt: skip
    replica_key = streams.replica_heartbeat(str(replica.id))
    beat(client, replica_key, msgspec.to_builtins(status))
    try:
        page = alice_client.get(reverse("console:devices")).content.decode().replace("\xa0", " ")  # filesizeformat's
    finally:
        client.delete(pool_key, replica_key)
    pool = page[page.index('data-pool="gpu.h200"') :]
    gpu = pool[pool.index('data-device="gpu-host-7/cuda:1"') :]
    gpu = gpu[: gpu.index("</tr>")]
    assert "40.0 GB / 80.0 GB" in gpu and "75%" in gpu  # the replica's reading wins over the pool's
    assert 'data-placed="gpu-llm/echo-0"' in gpu and "30.0 GB" in gpu
    idle = pool[pool.index('data-device="gpu-host-7/cuda:0"') :]
    idle = idle[: idle.index("</tr>")]
    assert "1.0 GB / 80.0 GB" in idle and "0%" in idle and "none" in idle
    assert 'data-nav="devices"' in page


def loading_panel(client, settings, name: str, **status) -> str:
    """The deployment panel of a new echo deployment whose replica is LOADING with this heartbeat."""
    deployment = deployment_create(name=name, pipeline=Pipeline.objects.get(name="echo"), model_dir="-",
                                   deploy_config={})  # fmt: skip
    replica = deployment.replicas.get()
    replica.state = "LOADING"
    replica.save()
    redis_client = redis.Redis.from_url(settings.REDIS_URL)
    key = streams.replica_heartbeat(str(replica.id))
    beat(redis_client, key, msgspec.to_builtins(ReplicaStatus(
        replica_id=str(replica.id), deployment_id=str(deployment.id), stage="echo", state="LOADING", **status)))  # fmt: skip
    try:
        return client.get(reverse("console:deployment-panel", args=[name])).content.decode()
    finally:
        redis_client.delete(key)


@pytest.mark.django_db
def test_a_loading_replica_shows_its_phase_and_a_down_redis_is_said(alice_client, pipelines, settings):
    panel = loading_panel(alice_client, settings, "slow", progress=0.3, phase="importing the model family")
    assert 'data-load-progress="30"' in panel and "importing the model family" in panel

    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    page = alice_client.get(reverse("console:devices")).content.decode()
    assert "data-devices-unavailable" in page
    assert alice_client.get(reverse("console:deployment-panel", args=["slow"])).status_code == 200


@pytest.mark.django_db
def test_a_loading_replica_shows_its_weights_bytes_of_the_total(alice_client, pipelines, settings):
    loaded, total = int(1.2 * GIB), int(14.8 * GIB)
    panel = loading_panel(alice_client, settings, "weights", progress=loaded / total, phase="loading weights",
                          weights_loaded_bytes=loaded, weights_total_bytes=total)  # fmt: skip
    assert "1.2 of 14.8 GiB" in panel and 'data-load-progress="8"' in panel and "loading weights" in panel


@pytest.fixture
def slow_weights_stack(platform_env, tmp_path, pipelines, settings):
    """A live platform whose replica hosts read weights slowly (a pause after each tensor)."""
    env = {**platform_env, "OMNISTAGE_TEST_WEIGHT_READ_DELAY_S": "0.4", "OMNISTAGE_HEARTBEAT_INTERVAL": "0.5",
           "OMNISTAGE_HEARTBEAT_TTL": "15"}  # fmt: skip
    stack = ConsoleStack(env, tmp_path)
    settings.REDIS_URL = stack.redis.url
    yield stack
    Deployment.objects.update(desired_state="STOPPED")
    stack.stop()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_live_replica_shows_its_weights_loading_then_reports_them_all(
    slow_weights_stack, alice_client, repo_tiny_models, tmp_path
):
    checkpoint = shutil.copytree(repo_tiny_models / "qwen2", tmp_path / "qwen2")
    size = (checkpoint / "model.safetensors").stat().st_size
    deployment_create(name="slow-llm", pipeline=Pipeline.objects.get(name="llm"), model_dir=str(checkpoint),
                      deploy_config={})  # fmt: skip

    def loading_bytes():
        panel = alice_client.get(reverse("console:deployment-panel", args=["slow-llm"])).content.decode()
        shown = re.search(r"data-load-bytes>(\d+\.\d) of (\d+\.\d) MiB<", panel)
        return (shown, panel) if shown and float(shown.group(1)) < float(shown.group(2)) else None

    try:
        shown, panel = wait_for(loading_bytes, timeout=180, interval=0.2, what="the weights' bytes on the page")
    except TimeoutError:
        print(slow_weights_stack.logs())
        raise
    assert float(shown.group(2)) == round(size / (1 << 20), 1) and "loading weights" in panel
    width = int(re.search(r'data-load-progress="(\d+)"', panel).group(1))
    assert 0 <= width < 100

    deployment = wait_running("slow-llm", slow_weights_stack)
    row = ReplicaOutput(deployment.replicas.get()).data  # the REST representation
    assert row["weights_total_bytes"] == size and row["weights_loaded_bytes"] == size
