"""Stage groups on the platform: one replica row and one host process per group replica, a
request through both stages of the group, a failing request that fails alone, a killed group
host restarted like any replica host, and a group that scales as one."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from procs import wait_for
from runtime_serving import collect, request, text_of

from control_plane.deployments.models import Deployment, Pipeline
from control_plane.deployments.replica_tasks import replica_spec
from control_plane.deployments.services import deployment_create, deployment_scale

pytestmark = [pytest.mark.django_db(transaction=True)]

GROUPED = {
    "stages": {
        "echo": {"group": "speech", "options": {"delay_s": 0.02}},
        "voice": {"group": "speech", "options": {"delay_s": 0.02}},
    }
}


def audio_samples(messages) -> int:
    return sum(
        m.output.payloads["audio"].shape[-1] for m in messages if m.output is not None and "audio" in m.output.payloads
    )


def test_a_group_has_one_replica_row_whose_spec_names_every_stage(pipelines):
    deployment = deployment_create(
        name="grouped", pipeline=Pipeline.objects.get(name="echo-voice"), model_dir="-", deploy_config=GROUPED
    )
    (replica,) = deployment.replicas.all()
    assert (replica.stage, replica.group, replica.members) == ("echo", "speech", ["echo", "voice"])
    assert replica.label == "speech (echo+voice)"
    spec = replica_spec(replica)
    assert spec.group == "speech" and list(spec.members) == ["echo", "voice"]
    assert spec.members["voice"].options == {"delay_s": 0.02}

    deployment_scale(deployment=Deployment.objects.get(name="grouped"), stage="voice", replicas=2)
    rows = Deployment.objects.get(name="grouped").replicas.order_by("index")
    assert [(r.stage, r.group, r.index) for r in rows] == [("echo", "speech", 0), ("echo", "speech", 1)]
    config = Deployment.objects.get(name="grouped").deploy_config["stages"]
    assert config["echo"]["replicas"] == config["voice"]["replicas"] == 2


@pytest.mark.slow
def test_a_grouped_deployment_serves_fails_alone_and_restarts_a_killed_host(stack):
    created = stack.deploy("echo-grouped", "echo-voice", deploy_config=GROUPED)
    assert [(r["stage"], r["group"], r["members"]) for r in created["replicas"]] == [
        ("echo", "speech", ["echo", "voice"])
    ]
    running = stack.wait_state("echo-grouped", "RUNNING")

    async def three():
        return await asyncio.gather(
            collect(stack, running["id"], request("one two three four")),
            collect(stack, running["id"], request("doomed", echo_fail=True)),
            collect(stack, running["id"], request("five six")),
        )

    good, bad, other = asyncio.run(three())
    assert text_of(good) == "one two three four" and good[-1].kind == "complete"
    assert audio_samples(good) == 4 * 160  # the voice stage ran inside the group
    assert text_of(other) == "five six" and other[-1].kind == "complete"
    assert bad[-1].kind == "fail" and "echo_fail" in bad[-1].error.message

    from workers.processes import replica_host_pids

    (replica,) = running["replicas"]
    (pid,) = wait_for(lambda: replica_host_pids(replica["id"]), what="the group host's process")
    os.kill(pid, signal.SIGKILL)

    def restarted():
        body = stack.api("GET", "/api/deployments/echo-grouped/").json()
        return body if body["replicas"][0]["restarts"] >= 1 and body["state"] == "RUNNING" else None

    wait_for(restarted, timeout=90, interval=0.3, what="the group host restarted")
    again = asyncio.run(collect(stack, running["id"], request("back again")))
    assert text_of(again) == "back again" and audio_samples(again) == 2 * 160
