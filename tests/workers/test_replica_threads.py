"""Each replica host takes a bounded number of CPU threads (a pool hosts several replica processes)."""

from __future__ import annotations

import os

import msgspec
import pytest
from replica_testing import echo_spec, load_in_fresh_interpreter, tiny_llm_spec

from stages.config import StageDeployConfig
from stages.errors import ConfigError
from stages.protocol import ReplicaSpec
from workers.replica_engine import replica_threads, stage_deploy_of


@pytest.mark.parametrize(
    ("cpu_threads", "setting", "threads"),
    [(None, None, 1), (None, "3", 3), (2, "3", 2)],
    ids=["default", "setting", "stage"],
)
def test_a_replica_takes_its_stage_s_threads_else_the_setting_else_one(monkeypatch, cpu_threads, setting, threads):
    monkeypatch.delenv("OMNISTAGE_REPLICA_THREADS", raising=False)
    if setting is not None:
        monkeypatch.setenv("OMNISTAGE_REPLICA_THREADS", setting)
    assert replica_threads(StageDeployConfig(cpu_threads=cpu_threads)) == threads


@pytest.mark.parametrize("setting", ["many", "0", ""])
def test_a_bad_setting_names_the_variable(monkeypatch, setting):
    monkeypatch.setenv("OMNISTAGE_REPLICA_THREADS", setting)
    if setting == "":  # unset in effect: the default
        assert replica_threads(StageDeployConfig()) == 1
        return
    with pytest.raises(ConfigError) as error:
        replica_threads(StageDeployConfig())
    assert error.value.field == "OMNISTAGE_REPLICA_THREADS"


def test_a_bad_stage_thread_count_names_the_field():
    spec = echo_spec("r1", "d1")
    spec["stage_deploy"]["cpu_threads"] = 0
    with pytest.raises(ConfigError) as error:
        stage_deploy_of(msgspec.convert(spec, ReplicaSpec))
    assert error.value.field == "stage_deploy.cpu_threads"


def test_building_a_replica_engine_applies_its_thread_count():
    """torch's thread count is process-wide, so this one case builds the engine (a tiny Qwen2: a family
    that runs on torch) in a fresh interpreter, whose torch had 7 threads before."""
    spec = tiny_llm_spec("r1", "d1")
    spec["stage_deploy"]["cpu_threads"] = 2
    env = {key: value for key, value in os.environ.items() if key != "OMNISTAGE_REPLICA_THREADS"}
    assert load_in_fresh_interpreter(spec, env, start_threads=7)["threads"] == 2
