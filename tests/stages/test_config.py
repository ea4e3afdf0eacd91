"""Pipeline and deploy configs: YAML/JSON round trips, and errors that name the field."""

from __future__ import annotations

import pytest

from stages.config import (
    DeployConfig,
    PipelineConfig,
    StageDeployConfig,
    dump_json,
    dump_yaml,
    load_deploy_config,
    load_pipeline_config,
)
from stages.echo import family as echo_family
from stages.errors import ConfigError
from stages.models import FAMILIES, detect_family, get_family
from stages.models.llm import PIPELINE as LLM_PIPELINE

VOICE = echo_family.pipeline_named("voice")


@pytest.mark.parametrize("pipeline", [LLM_PIPELINE, VOICE, echo_family.pipeline_named("chain")])
@pytest.mark.parametrize("dump", [dump_json, dump_yaml])
def test_pipeline_round_trips(pipeline, dump):
    assert load_pipeline_config(dump(pipeline)) == pipeline


@pytest.mark.parametrize("dump", [dump_json, dump_yaml])
def test_deploy_round_trips(dump):
    deploy = DeployConfig(
        stages={
            "echo": StageDeployConfig(replicas=2, pool="gpu.h200", device="cuda:1", dtype="bfloat16", options={"x": 1}),
            "voice": StageDeployConfig(backend="echo", connector="shm", load_format="dummy"),
        },
        max_queue=8,
        hop_timeout_s=5.0,
    )
    assert load_deploy_config(dump(deploy), VOICE) == deploy


def test_yaml_written_by_hand_loads():
    text = """
stages:
  llm:
    backend: vllm
    replicas: 2
    max_length: 4096
max_queue: 10
"""
    deploy = load_deploy_config(text, LLM_PIPELINE)
    assert deploy.for_stage(LLM_PIPELINE.stage_named("llm")).backend == "vllm"
    assert deploy.for_stage(LLM_PIPELINE.stage_named("llm")).replicas == 2


def test_a_stage_left_out_takes_the_stage_default_backend():
    assert DeployConfig().for_stage(LLM_PIPELINE.stage_named("llm")).backend == "torch"
    assert DeployConfig().for_stage(VOICE.stage_named("voice")).backend == "echo"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"stages": {"llm": {"replicas": 0}}}, "stages.llm.replicas"),
        ({"stages": {"llm": {"replicas": "two"}}}, "stages.llm.replicas"),
        ({"stages": {"llm": {"device": "tpu"}}}, "stages.llm.device"),
        ({"stages": {"llm": {"pool": "bad pool!"}}}, "stages.llm.pool"),
        ({"stages": {"llm": {"pools": ["cpu.a", "bad pool!"]}}}, "stages.llm.pools.1"),
        ({"stages": {"llm": {"backend": "tensorrt"}}}, "stages.llm.backend"),
        ({"stages": {"llm": {"load_format": "random"}}}, "stages.llm.load_format"),
        ({"stages": {"talker": {}}}, "stages.talker"),
        ({"max_queue": 0}, "max_queue"),
        ({"hop_timeout_s": -1}, "hop_timeout_s"),
    ],
)
def test_deploy_errors_name_the_field(data, field):
    with pytest.raises(ConfigError) as excinfo:
        load_deploy_config(data, LLM_PIPELINE)
    assert excinfo.value.field == field
    assert field in str(excinfo.value)


def test_replicas_spread_over_the_pools_in_turn():
    spread = load_deploy_config({"stages": {"llm": {"replicas": 3, "pools": ["cpu.a", "cpu.b"]}}}, LLM_PIPELINE)
    stage = spread.for_stage(LLM_PIPELINE.stage_named("llm"))
    assert [stage.pool_of(index) for index in range(3)] == ["cpu.a", "cpu.b", "cpu.a"]
    single = load_deploy_config({"stages": {"llm": {"replicas": 2, "pool": "gpu"}}}, LLM_PIPELINE)
    assert [single.for_stage(LLM_PIPELINE.stage_named("llm")).pool_of(i) for i in range(2)] == ["gpu", "gpu"]


def test_unknown_deploy_field_is_rejected_with_its_name():
    with pytest.raises(ConfigError) as excinfo:
        load_deploy_config({"stages": {"llm": {"replica": 2}}}, LLM_PIPELINE)
    assert "replica" in str(excinfo.value)


def _stage(id, name, **extra):
    return {"id": id, "name": name, "kind": "ar", **extra}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"family": "f", "name": "p", "stages": []}, "stages"),
        ({"family": "f", "name": "p", "stages": [_stage(0, "a"), _stage(0, "b")]}, "stages.id"),
        ({"family": "f", "name": "p", "stages": [_stage(0, "a"), _stage(1, "a")]}, "stages.name"),
        (
            {"family": "f", "name": "p", "stages": [_stage(0, "a")], "edges": [{"source": 0, "target": 5}]},
            "edges[0].target",
        ),
        (
            {
                "family": "f",
                "name": "p",
                "stages": [_stage(0, "a"), _stage(1, "b"), _stage(2, "c")],
                "edges": [{"source": 0, "target": 1}, {"source": 1, "target": 2}, {"source": 2, "target": 1}],
            },
            "edges",
        ),
        ({"family": "f", "name": "p", "stages": [_stage(0, "a", kind="transformer")]}, "stages[0].kind"),
        ({"family": "f", "name": "p", "stages": [_stage(0, "a", init_image=True)]}, "stages[0].init_image"),
    ],
)
def test_pipeline_errors_name_the_field(data, field):
    with pytest.raises(ConfigError) as excinfo:
        load_pipeline_config(data)
    assert excinfo.value.field == field


def test_bad_text_is_a_config_error():
    with pytest.raises(ConfigError):
        load_deploy_config("stages: [unclosed")


def test_family_registry_resolves_lazily_and_detects_checkpoints(tmp_path):
    assert "llm" in FAMILIES and get_family("echo").pipeline.name == "echo"
    with pytest.raises(ConfigError) as excinfo:
        get_family("nope")
    assert excinfo.value.field == "family"
    (tmp_path / "config.json").write_text('{"model_type": "qwen2"}')
    assert detect_family(tmp_path) == "llm"
    (tmp_path / "config.json").write_text('{"model_type": "mamba9"}')
    with pytest.raises(ConfigError, match="mamba9"):
        detect_family(tmp_path)


def test_family_variants_by_key_or_pipeline_name():
    assert echo_family.pipeline_named("chain") is echo_family.pipeline_named("echo-chain")
    with pytest.raises(ConfigError) as excinfo:
        echo_family.pipeline_named("nope")
    assert excinfo.value.field == "pipeline"
    assert isinstance(echo_family.pipeline, PipelineConfig)
