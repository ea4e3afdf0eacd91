"""Each replica host takes a bounded number of CPU threads (a pool hosts several replica processes)."""

from __future__ import annotations

import msgspec
import pytest
import torch
from replica_testing import echo_spec

from stages.errors import ConfigError
from stages.protocol import ReplicaSpec
from workers.replica_engine import load_replica_engine


@pytest.fixture
def restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def spec(**stage_deploy) -> ReplicaSpec:
    raw = echo_spec("r1", "d1")
    raw["stage_deploy"].update(stage_deploy)
    return msgspec.convert(raw, ReplicaSpec)


@pytest.mark.parametrize(
    ("stage_deploy", "env", "threads"),
    [({}, None, 1), ({}, "3", 3), ({"cpu_threads": 2}, "3", 2)],
    ids=["default", "setting", "stage"],
)
def test_a_replica_takes_its_stage_s_threads_else_the_setting_else_one(
    restore_threads, monkeypatch, stage_deploy, env, threads
):
    if env is None:
        monkeypatch.delenv("OMNISTAGE_REPLICA_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMNISTAGE_REPLICA_THREADS", env)
    torch.set_num_threads(7)
    load_replica_engine(spec(**stage_deploy))
    assert torch.get_num_threads() == threads


def test_a_bad_thread_count_names_the_field(restore_threads, monkeypatch):
    with pytest.raises(ConfigError) as raised:
        load_replica_engine(spec(cpu_threads=0))
    assert raised.value.field == "stage_deploy.cpu_threads"
    monkeypatch.setenv("OMNISTAGE_REPLICA_THREADS", "many")
    with pytest.raises(ConfigError) as raised:
        load_replica_engine(spec())
    assert raised.value.field == "OMNISTAGE_REPLICA_THREADS"
