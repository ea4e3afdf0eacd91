"""The deployment page's logs tail: the lines each replica host published (workers/log_stream.py)."""

from __future__ import annotations

import re

import pytest
import redis
from console_data import SCRIPT
from console_stack import wait_running
from django.test import Client
from django.urls import reverse
from procs import wait_for

from control_plane.deployments.models import Deployment, Pipeline
from control_plane.deployments.services import deployment_create
from stages import streams


def replica_log(page: str, replica: str) -> str:
    """The text of one replica's block in the logs card."""
    block = page[page.index(f'data-replica-log="{replica}"') :]
    return block[: block.index('<div class="replica-log"') if '<div class="replica-log"' in block else None]


def lines_of(block: str) -> list[str]:
    return re.findall(r"<div>(.*?)</div>", block)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_live_deployment_page_shows_what_its_replica_hosts_logged(console_stack, alice):
    deployment_create(name="voice", pipeline=Pipeline.objects.get(name="echo-voice"), model_dir="-", deploy_config={})
    wait_running("voice", console_stack)
    replicas = {f"{r.stage}-{r.index}": str(r.id) for r in Deployment.objects.get(name="voice").replicas.all()}
    client = Client()
    client.force_login(alice)

    def panel() -> str:
        return client.get(reverse("console:deployment-panel", args=["voice"])).content.decode()

    for name, replica_id in replicas.items():
        ready = f"workers.replica_status: replica {replica_id}: READY"
        wait_for(lambda: any(line.endswith(ready) for line in lines_of(replica_log(panel(), name))),  # noqa: B023
                 timeout=30, what=f"{name}'s READY line")  # fmt: skip
    page = client.get(reverse("console:deployment", args=["voice"])).content.decode()
    echo = lines_of(replica_log(page, "echo-0"))
    assert echo[0].endswith(f"replica {replicas['echo-0']}: READY")  # newest first (shown last)
    assert f"replica {replicas['voice-0']}" not in "\n".join(echo)  # each replica shows its own lines


@pytest.mark.django_db
def test_log_lines_are_shown_as_text_and_a_missing_redis_is_said(alice_client, pipelines, settings):
    deployment = deployment_create(name="dep", pipeline=Pipeline.objects.get(name="echo"), model_dir="-",
                                   deploy_config={})  # fmt: skip
    replica = deployment.replicas.get()
    client = redis.Redis.from_url(settings.REDIS_URL)
    key = streams.replica_logs(str(replica.id))
    client.xadd(key, {"line": f"INFO a line with {SCRIPT}"})
    try:
        page = alice_client.get(reverse("console:deployment-panel", args=["dep"])).content.decode()
        assert SCRIPT not in page and "INFO a line with &lt;script&gt;" in page
    finally:
        client.delete(key)
    page = alice_client.get(reverse("console:deployment-panel", args=["dep"])).content.decode()
    assert "No lines yet" in replica_log(page, "echo-0")
    settings.REDIS_URL = "unix:///nonexistent/redis.sock"
    page = alice_client.get(reverse("console:deployment-panel", args=["dep"])).content.decode()
    assert "data-logs-unavailable" in page
