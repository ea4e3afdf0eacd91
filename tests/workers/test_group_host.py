"""The group host as a real process: the echo-voice pipeline's two stages in one process, fed
by the replica input stream. The voice stage's inputs pass in memory; only text and audio come
out; a failing stage fails only its request; an engine in an unknown state restarts the host."""

from __future__ import annotations

import signal

import msgspec
import pytest
from procs import wait_for
from replica_testing import (
    finished_output,
    forget,
    heartbeat,
    outputs,
    send_request,
    start_host,
    unique,
    wait_state,
)

from stages import streams
from stages.echo import family as echo_family
from stages.echo_payloads import PAYLOAD_KEY, PayloadDigest, echo_payload
from stages.protocol import RequestOptions, SamplingParams, StageRequest

pytestmark = [pytest.mark.live, pytest.mark.timeout(120)]

VOICE = echo_family.pipeline_named("voice")


def group_spec(replica_id: str, deployment_id: str, **options) -> dict:
    member = {"group": "g", "options": options}
    return {
        "replica_id": replica_id,
        "deployment_id": deployment_id,
        "family": "echo",
        "pipeline": msgspec.to_builtins(VOICE),
        "stage": "echo",
        "stage_id": 0,
        "model_dir": "",
        "stage_deploy": member,
        "group": "g",
        "members": {"echo": member, "voice": {"group": "g", "backend": "echo"}},
    }


@pytest.fixture
def group(client, redis_url, tmp_path):
    class Group:
        id = unique("group")
        deployment = unique("deployment")
        hosts: list = []

        def start(self, **options):
            host = start_host(group_spec(self.id, self.deployment, **options), redis_url, tmp_path / "host.log")
            self.hosts.append(host)
            wait_state(client, self.id, "READY")
            return host

    group = Group()
    group.hosts = []
    yield group
    for host in group.hosts:
        host.signal(signal.SIGKILL)
        host.stop()
    forget(client, group.id, group.deployment)


def entry(request_id: str, prompt: str, **extra) -> StageRequest:
    return StageRequest(request_id=request_id, stage_id=0, prompt=prompt, options=RequestOptions(extra=extra))


def by_stage(client, group, request_id: str) -> dict[int, list]:
    produced: dict[int, list] = {}
    for output in outputs(client, group.deployment, request_id):
        produced.setdefault(output.stage_id, []).append(output)
    return produced


def test_text_and_audio_leave_the_group_and_the_hand_over_stays_in_memory(client, group):
    group.start(payload_bytes=64)
    send_request(client, group.id, entry("a", "one two three"))
    wait_for(lambda: len([o for o in outputs(client, group.deployment, "a") if o.finished]) == 2, what="both stages")
    produced = by_stage(client, group, "a")
    assert set(produced) == {0, 1}
    text, sound = produced[0], produced[1]
    assert "".join(o.text for o in text) == "one two three"
    assert [o.seq for o in text] == list(range(len(text)))
    assert all(PAYLOAD_KEY not in o.payloads for o in text)  # the voice's input stayed inside
    assert sum(o.payloads["audio"].shape[0] for o in sound if "audio" in o.payloads) == 3 * 160
    expected = PayloadDigest()
    for seq in range(3):
        expected.add({PAYLOAD_KEY: echo_payload("a", seq, 64)})
    assert sound[-1].params["received_payload_bytes"] == expected.nbytes  # what the echo stage attached, intact
    assert sound[-1].params["received_payload_crc32"] == expected.crc32
    assert client.xlen(streams.replica_input(group.id)) == 0
    assert heartbeat(client, group.id).running == 0


def test_the_inner_stages_sampling_comes_with_the_entry_request(client, group):
    group.start()
    request = entry("s", "one two three four")
    request.group_sampling = {"voice": SamplingParams(max_tokens=2)}
    send_request(client, group.id, request)
    wait_for(lambda: len([o for o in outputs(client, group.deployment, "s") if o.finished]) == 2, what="both stages")
    sound = by_stage(client, group, "s")[1]
    assert sum(o.payloads["audio"].shape[0] for o in sound if "audio" in o.payloads) == 2 * 160
    assert sound[-1].finish_reason == "length"


def test_a_failing_request_fails_alone_and_the_group_keeps_serving(client, group):
    group.start(delay_s=0.02)
    send_request(client, group.id, entry("ok", "a b c d e f"))
    send_request(client, group.id, entry("bad", "x y", echo_fail=True))
    failed = finished_output(client, group.deployment, "bad")
    assert failed.error is not None and failed.error.code == "echo_fail"
    wait_for(lambda: len([o for o in outputs(client, group.deployment, "ok") if o.finished]) == 2, what="ok")
    assert all(o.error is None for o in outputs(client, group.deployment, "ok"))
    assert not [o for o in outputs(client, group.deployment, "bad") if o.stage_id == 1]  # never reached the voice


def test_a_step_crash_of_the_only_request_fails_it_and_the_host_stays(client, group):
    host = group.start()
    send_request(client, group.id, entry("crash", "x y", echo_crash=True))
    failed = finished_output(client, group.deployment, "crash")
    assert "echo_crash" in failed.error.message
    send_request(client, group.id, entry("after", "still here"))
    wait_for(lambda: len([o for o in outputs(client, group.deployment, "after") if o.finished]) == 2, what="after")
    assert host.process.poll() is None


def test_a_step_crash_no_request_explains_fails_them_all_and_the_host_exits_to_be_restarted(client, group):
    host = group.start(delay_s=0.05)
    send_request(client, group.id, entry("long", " ".join(["w"] * 200)))
    wait_for(lambda: outputs(client, group.deployment, "long"), what="the first request to run")
    send_request(client, group.id, entry("crash", "x y", echo_crash=True))
    assert host.process.wait(timeout=30) == 1
    for request_id in ("long", "crash"):
        assert finished_output(client, group.deployment, request_id).error is not None
    assert heartbeat(client, group.id) is None or heartbeat(client, group.id).state == "ERROR"
