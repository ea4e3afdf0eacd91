"""Admission per stage at the entry, the retry estimate of a refusal, and the real-time bound of
audio: pure core, no clock."""

from __future__ import annotations

import pytest
from test_orchestrator_core import DEPLOYMENT, of_type, output, submit

from stages.config import load_deploy_config
from stages.echo import family as echo_family
from stages.errors import ConfigError
from stages.orchestrator import DeploymentUp, Fail, Orchestrator, ReplicaUp, SendToReplica, Tick
from stages.orchestrator.admission import StageSeconds, retry_after_s
from stages.protocol import RequestOptions, Tensor


def make_core(variant="default", replicas=None, **deploy) -> Orchestrator:
    pipeline = echo_family.pipeline_named(variant)
    core = Orchestrator()
    config = load_deploy_config(deploy, pipeline)
    core.handle(DeploymentUp(deployment_id=DEPLOYMENT, pipeline=pipeline, deploy=config))
    for stage in pipeline.stages:
        for replica_id in (replicas or {}).get(stage.name, [f"{stage.name}-0"]):
            core.handle(ReplicaUp(replica_id=replica_id, deployment_id=DEPLOYMENT, stage=stage.name))
    return core


def test_a_full_stage_refuses_with_overloaded_and_a_retry_estimate_then_admits_when_a_slot_frees():
    core = make_core(stages={"echo": {"max_running": 2, "max_waiting": 1}})
    for index in range(3):
        assert of_type(submit(core, f"r{index}"), SendToReplica)
    (refused,) = submit(core, "r3")
    assert isinstance(refused, Fail) and refused.error.code == "overloaded"
    assert refused.error.retry_after_s >= 1
    assert "'echo'" in refused.error.message and "max_running=2" in refused.error.message
    assert "r3" not in core.requests  # refused before any stage saw it

    output(core, "r0", text="a", finished=True)
    assert of_type(submit(core, "r4"), SendToReplica)


def test_capacity_scales_with_replicas_and_defaults_to_max_batch():
    core = make_core(replicas={"echo": ["e0", "e1"]}, stages={"echo": {"replicas": 2, "max_batch": 2}})
    admitted = [submit(core, f"r{index}") for index in range(9)]
    assert sum(1 for actions in admitted if of_type(actions, SendToReplica)) == 8  # 2 x (2 running + 2 waiting)
    assert of_type(admitted[-1], Fail)[0].error.code == "overloaded"


def test_requests_still_upstream_count_against_a_slow_downstream_stage():
    core = make_core("chain", stages={"echo2": {"max_running": 1, "max_waiting": 0}})
    assert of_type(submit(core, "r1"), SendToReplica)  # still in `echo`: echo2 has not seen it
    (refused,) = submit(core, "r2")
    assert refused.error.code == "overloaded" and "'echo2'" in refused.error.message


def test_stages_a_request_does_not_need_do_not_refuse_it():
    core = make_core("voice", stages={"voice": {"max_running": 1, "max_waiting": 0}})
    assert of_type(submit(core, "spoken"), SendToReplica)
    assert of_type(submit(core, "text-only", options=RequestOptions(modalities=["text"])), SendToReplica)
    assert of_type(submit(core, "spoken-too"), Fail)[0].error.code == "overloaded"


def test_the_retry_estimate_follows_the_stage_durations_seen():
    assert retry_after_s(stage_seconds=1.0, load=4, running=4) == 1
    assert retry_after_s(stage_seconds=10.0, load=8, running=4) == 13  # 5 ahead, 4 at a time, 10 s each
    assert retry_after_s(stage_seconds=1000.0, load=8, running=1) == 60  # capped
    seconds = StageSeconds()
    assert seconds.of("talker") == 1.0
    seconds.observe("talker", 5.0)
    seconds.observe("talker", 10.0)
    assert seconds.of("talker") == pytest.approx(6.0)

    core = make_core(stages={"echo": {"max_running": 1, "max_waiting": 0}})
    submit(core, "slow", at=0.0)
    output(core, "slow", text="a", finished=True, at=30.0)
    submit(core, "busy", at=31.0)
    (refused,) = submit(core, "refused", at=31.5)
    assert refused.error.retry_after_s == 30.0


def test_audio_falling_behind_real_time_fails_the_request_early():
    core = make_core("voice", max_realtime_lag_s=5.0, hop_timeout_s=100.0)
    submit(core, at=0.0)
    output(core, text="a", finished=True, at=0.1)
    second = Tensor(dtype="float32", shape=[16000], data=bytes(64000))
    output(core, stage_id=1, payloads={"audio": second}, params={"sample_rate": 16000}, at=1.0)
    assert core.handle(Tick(at=6.5)) == []  # 1 s of audio in 5.5 s: 4.5 s behind
    (failed,) = of_type(core.handle(Tick(at=7.5)), Fail)
    assert failed.error.code == "behind_realtime" and "max_realtime_lag_s=5" in failed.error.message


def test_no_real_time_bound_when_it_is_switched_off_or_before_any_audio():
    core = make_core("voice", max_realtime_lag_s=None, hop_timeout_s=100.0)
    submit(core, at=0.0)
    second = Tensor(dtype="float32", shape=[16000], data=bytes(64000))
    output(core, text="a", finished=True, at=0.1)
    output(core, stage_id=1, payloads={"audio": second}, params={"sample_rate": 16000}, at=1.0)
    assert core.handle(Tick(at=60.0)) == []
    quiet = make_core("voice", max_realtime_lag_s=1.0, hop_timeout_s=100.0)
    submit(quiet, at=0.0)
    assert quiet.handle(Tick(at=50.0)) == []


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"stages": {"echo": {"max_running": 0}}}, "stages.echo.max_running"),
        ({"stages": {"echo": {"max_waiting": -1}}}, "stages.echo.max_waiting"),
        ({"max_realtime_lag_s": 0}, "max_realtime_lag_s"),
    ],
)
def test_admission_settings_are_validated_with_their_field(config, field):
    with pytest.raises(ConfigError) as raised:
        load_deploy_config(config, echo_family.pipeline_named("default"))
    assert raised.value.field == field
