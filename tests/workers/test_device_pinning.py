"""A replica placed on `cuda:N` runs in a host that sees only that GPU, as `cuda:0`: the variables
the worker starts it with, the device its engine is built on, and the launch itself."""

from __future__ import annotations

import os
import uuid

import msgspec
import pytest
import redis
from replica_testing import echo_spec

from stages.protocol import ReplicaSpec
from workers import replica_launcher
from workers.device_pinning import PINNED, local_device, pinned_environment
from workers.replica_engine import stage_deploy_of


@pytest.mark.parametrize(
    ("device", "visible", "expected"),
    [
        ("cuda:1", None, {"CUDA_VISIBLE_DEVICES": "1", PINNED: "cuda:1"}),
        ("cuda:1", "4, 6", {"CUDA_VISIBLE_DEVICES": "6", PINNED: "cuda:1"}),
        ("cuda:0", "3", {"CUDA_VISIBLE_DEVICES": "3", PINNED: "cuda:0"}),
        ("cuda:2", "4,6", {}),  # not visible here: the engine names the missing device
        ("cuda", None, {}),
        ("cpu", "0", {}),
    ],
)
def test_a_gpu_replica_is_pinned_to_the_worker_s_physical_device(device, visible, expected):
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert pinned_environment(device, environ) == expected


def test_inside_a_pinned_host_the_device_is_cuda_0():
    spec = msgspec.convert({**echo_spec("r1", "d1"), "device": "cuda:1"}, ReplicaSpec)
    assert stage_deploy_of(spec).device == "cuda:1"  # not pinned: the name as placed
    pinned = pinned_environment("cuda:1", {})
    assert local_device("cuda:1", pinned) == "cuda:0"
    assert local_device("cuda:1", {PINNED: "cuda:0"}) == "cuda:1"  # pinned to another device: untouched
    os.environ.update(pinned)
    try:
        assert stage_deploy_of(spec).device == "cuda:0"
    finally:
        for name in pinned:
            os.environ.pop(name)


class StartedHost:
    pid = 4242

    def __init__(self, argv, **kwargs):
        self.argv, self.env = argv, kwargs["env"]

    def wait(self):
        return 0


def test_the_worker_starts_the_host_with_only_its_gpu_visible(monkeypatch, redis_url):
    started: list[StartedHost] = []
    monkeypatch.setattr(
        replica_launcher.subprocess, "Popen", lambda argv, **kw: started.append(StartedHost(argv, **kw)) or started[-1]
    )
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    client = redis.Redis.from_url(redis_url)
    spec = msgspec.convert({**echo_spec(f"pin-{uuid.uuid4().hex}", "d1"), "device": "cuda:1"}, ReplicaSpec)
    launch = replica_launcher.launch_replica_host(spec, redis_url, client, parent_pid=os.getpid())
    assert launch.started and len(started) == 1
    assert started[0].env["CUDA_VISIBLE_DEVICES"] == "3" and started[0].env[PINNED] == "cuda:1"
    assert started[0].env["PATH"] == os.environ["PATH"]  # the rest of the worker's environment
