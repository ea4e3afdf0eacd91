"""Fixtures of the two-host tests: the hosts (network namespaces made and removed by the test,
even when it fails), the live platform over them, and the tiny Qwen2.5-Omni checkpoint."""

from __future__ import annotations

import signal

import host_bed
import pytest
from hosts_stack import HostsStack
from procs import unavailable

from control_plane.accounts.services import api_key_create
from control_plane.deployments.management.commands.sync_pipelines import discover_pipelines, pipeline_sync


@pytest.fixture(scope="session")
def namespaces_ok():
    why = host_bed.available()
    if why is not None:
        unavailable(f"two-host tests need network, mount, UTS and pid namespaces: {why}")
    previous = signal.signal(signal.SIGTERM, _interrupt)  # a killed run still removes its hosts
    yield
    signal.signal(signal.SIGTERM, previous)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture
def bed(namespaces_ok):
    hosts = host_bed.HostBed(["a", "b"]).create()
    try:
        yield hosts
    finally:
        hosts.remove()


@pytest.fixture(scope="session")
def hosts_pipeline_definitions():
    return discover_pipelines()


@pytest.fixture
def hosts_operator(transactional_db, django_user_model, hosts_pipeline_definitions):
    pipeline_sync(hosts_pipeline_definitions)
    user = django_user_model.objects.create_user("hosts-operator", password="x", is_staff=True)
    _, secret = api_key_create(user=user, name="ops", scopes=["inference", "deployments:read", "deployments:write"])
    return secret


@pytest.fixture
def hosts_stack(bed, platform_env, tmp_path, hosts_operator):
    env = {
        **platform_env,
        "OMNISTAGE_REPLICA_BACKOFF_BASE_S": "1",
        "OMNISTAGE_REQUEST_STREAM_TTL_S": "120",
        # six replica hosts importing torch at once on a loaded machine starve their heartbeat threads
        "OMNISTAGE_HEARTBEAT_INTERVAL": "0.5",
        "OMNISTAGE_HEARTBEAT_TTL": "4",
    }
    stack = HostsStack(bed, env, tmp_path, hosts_operator)
    try:
        yield stack.start()
    finally:
        stack.stop()


@pytest.fixture
def omni_dir(repo_tiny_models) -> str:
    """The tiny Qwen2.5-Omni under the models directory (a relative model_dir names it)."""
    return "qwen2_5_omni"
