"""Which CUDA stream a replica thread steps on (stages/orchestrator/replica_streams.py)."""

from __future__ import annotations

import pytest

from stages.orchestrator.replica_streams import HIGH_PRIORITY, own_stream_device, stream_priority


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
