"""Each replica host takes a bounded number of CPU threads (a pool hosts several replica processes).

torch's thread count is process-wide, so each case builds the engine in a fresh interpreter, as a
replica host does."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from procs import PYTHON, REPO
from replica_testing import echo_spec

BUILD_AND_COUNT = """
import json, sys, msgspec, torch
from stages.protocol import ReplicaSpec
from stages.errors import ConfigError
from workers.replica_engine import load_replica_engine
torch.set_num_threads(7)
try:
    load_replica_engine(msgspec.convert(json.loads(sys.argv[1]), ReplicaSpec))
except ConfigError as error:
    print("field", error.field)
else:
    print("threads", torch.get_num_threads())
"""


def build(stage_deploy: dict, setting: str | None) -> str:
    spec = echo_spec("r1", "d1")
    spec["stage_deploy"].update(stage_deploy)
    env = {key: value for key, value in os.environ.items() if key != "OMNISTAGE_REPLICA_THREADS"}
    if setting is not None:
        env["OMNISTAGE_REPLICA_THREADS"] = setting
    result = subprocess.run(
        [PYTHON, "-c", BUILD_AND_COUNT, json.dumps(spec)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("stage_deploy", "setting", "threads"),
    [({}, None, 1), ({}, "3", 3), ({"cpu_threads": 2}, "3", 2)],
    ids=["default", "setting", "stage"],
)
def test_a_replica_takes_its_stage_s_threads_else_the_setting_else_one(stage_deploy, setting, threads):
    assert build(stage_deploy, setting) == f"threads {threads}"


def test_a_bad_thread_count_names_the_field():
    assert build({"cpu_threads": 0}, None) == "field stage_deploy.cpu_threads"
    assert build({}, "many") == "field OMNISTAGE_REPLICA_THREADS"
