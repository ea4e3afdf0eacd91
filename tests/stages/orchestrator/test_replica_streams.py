"""Which CUDA stream a replica thread steps on (stages/orchestrator/replica_streams.py)."""

from __future__ import annotations

import pytest

from stages.config import StageDeployConfig
from stages.errors import ConfigError
from stages.orchestrator.replica_streams import (
    HIGH_PRIORITY,
    StageStream,
    own_stream_device,
    stage_stream,
    stepping_on,
    stream_priority,
)


def test_autoregressive_stages_step_on_high_priority_streams_and_the_others_on_normal_ones(monkeypatch):
    monkeypatch.delenv("OMNISTAGE_STREAM_PRIORITIES", raising=False)
    assert stream_priority("ar") == HIGH_PRIORITY < 0
    assert stream_priority("generation") == 0
    assert stream_priority("diffusion") == 0


def test_priorities_turn_off_with_their_setting(monkeypatch):
    monkeypatch.setenv("OMNISTAGE_STREAM_PRIORITIES", "0")
    assert stream_priority("ar") == 0


@pytest.mark.parametrize(
    ("device", "setting", "expected"),
    [("cuda:0", None, "cuda:0"), ("cuda", "1", "cuda"), ("cuda:1", "0", None), ("cpu", None, None)],
)
def test_a_stage_on_a_gpu_gets_its_own_stream_unless_turned_off(monkeypatch, device, setting, expected):
    monkeypatch.delenv("OMNISTAGE_REPLICA_STREAMS", raising=False)
    if setting is not None:
        monkeypatch.setenv("OMNISTAGE_REPLICA_STREAMS", setting)
    assert own_stream_device(device) == expected


def test_a_stage_s_stream_carries_its_priority_and_its_share_of_the_sms(monkeypatch):
    monkeypatch.delenv("OMNISTAGE_REPLICA_STREAMS", raising=False)
    monkeypatch.delenv("OMNISTAGE_STREAM_PRIORITIES", raising=False)
    code2wav = StageDeployConfig(device="cuda:0", gpu_sms=112)
    assert stage_stream("generation", code2wav) == StageStream("cuda:0", priority=0, sms=112)
    assert stage_stream("ar", StageDeployConfig(device="cuda")) == StageStream("cuda", HIGH_PRIORITY, None)
    assert stage_stream("generation", StageDeployConfig(device="cpu", gpu_sms=112)) is None


def test_no_stream_spec_leaves_the_thread_on_its_current_stream():
    with stepping_on(None) as stream:
        assert stream is None


def test_a_share_of_the_sms_must_be_positive():
    with pytest.raises(ConfigError) as error:
        StageDeployConfig(device="cuda:0", gpu_sms=0).validate("stages.code2wav")
    assert error.value.field == "stages.code2wav.gpu_sms"
