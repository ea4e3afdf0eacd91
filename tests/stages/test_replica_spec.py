"""A ReplicaSpec carries its configs typed: they survive the start task (builtins) and the host's
`--spec-json` (JSON) unchanged, and a malformed one is refused as the spec is decoded."""

from __future__ import annotations

import msgspec
import pytest

from stages.config import PipelineConfig, StageDeployConfig
from stages.echo import family as echo_family
from stages.errors import ConfigError
from stages.protocol import ReplicaSpec


def group_spec() -> ReplicaSpec:
    member = StageDeployConfig(group="speech", max_batch=4, options={"delay_s": 0.02}, sampling={"max_tokens": 8})
    return ReplicaSpec(
        replica_id="r1",
        deployment_id="d1",
        family="echo",
        pipeline=echo_family.pipeline_named("voice"),
        stage="echo",
        stage_id=0,
        model_dir="",
        stage_deploy=member,
        device="cuda:1",
        group="speech",
        members={"echo": member, "voice": StageDeployConfig(group="speech", backend="echo", dtype="bfloat16")},
    )


def test_a_spec_round_trips_through_json_and_builtins_with_its_configs_typed():
    spec = group_spec()
    for decoded in (
        msgspec.json.decode(msgspec.json.encode(spec), type=ReplicaSpec),  # the host's --spec-json
        msgspec.convert(msgspec.to_builtins(spec), ReplicaSpec),  # the start task's argument
    ):
        assert decoded == spec
        assert isinstance(decoded.pipeline, PipelineConfig) and isinstance(decoded.stage_deploy, StageDeployConfig)
        assert list(decoded.members) == ["echo", "voice"]
        assert decoded.members["voice"].dtype == "bfloat16" and decoded.stage_deploy.options == {"delay_s": 0.02}
        assert decoded.pipeline.stage_named("voice").inputs == ("text",)  # tuples come back as tuples


def test_a_spec_without_a_pipeline_means_the_family_s_own():
    raw = {"replica_id": "r1", "deployment_id": "d1", "family": "echo", "stage": "echo", "stage_id": 0}
    spec = msgspec.convert({**raw, "model_dir": "", "stage_deploy": {}}, ReplicaSpec)
    assert spec.pipeline is None and spec.stage_deploy == StageDeployConfig() and spec.members == {}


@pytest.mark.parametrize(
    ("stage_deploy", "message"),
    [
        ({"max_batch": "many"}, "Expected `int`, got `str` - at `$.stage_deploy.max_batch`"),
        ({"dtype": "int3"}, "Invalid enum value 'int3' - at `$.stage_deploy.dtype`"),
        ({"max_batchh": 4}, "unknown field `max_batchh` - at `$.stage_deploy`"),
    ],
)
def test_a_malformed_stage_deploy_is_refused_as_the_spec_is_decoded(stage_deploy, message):
    raw = msgspec.to_builtins(group_spec())
    raw["stage_deploy"] = stage_deploy
    with pytest.raises(msgspec.ValidationError) as refused:
        msgspec.json.decode(msgspec.json.encode(raw), type=ReplicaSpec)
    assert message in str(refused.value)


def test_a_member_s_malformed_deploy_config_is_refused_too():
    raw = msgspec.to_builtins(group_spec())
    raw["members"]["voice"]["connector"] = "carrier-pigeon"
    with pytest.raises(msgspec.ValidationError, match=r"carrier-pigeon.*\$\.members"):
        msgspec.convert(raw, ReplicaSpec)


def test_an_invalid_pipeline_is_refused_by_its_own_checks_as_the_spec_is_decoded():
    raw = msgspec.to_builtins(group_spec())
    raw["pipeline"]["edges"][0]["target"] = 9
    with pytest.raises(
        msgspec.ValidationError, match=r"edges\[0\]\.target: no stage with id 9 - at `\$\.pipeline`"
    ) as refused:
        msgspec.convert(raw, ReplicaSpec)
    assert isinstance(refused.value.__cause__, ConfigError) and refused.value.__cause__.field == "edges[0].target"
