"""The per-step prompt-token budget: `prefill_chunk` when set, else 2048 on CUDA and 512 elsewhere."""

from __future__ import annotations

import torch

from stages.ar import ARTorchEngine
from stages.config import StageDeployConfig


def test_the_budget_is_the_setting_or_the_devices_default(tiny_llms):
    engine = ARTorchEngine.from_pretrained(tiny_llms["qwen3"], StageDeployConfig())
    assert engine.scheduler.token_budget == 512
    assert engine._prefill_budget(StageDeployConfig(prefill_chunk=96)) == 96
    engine.device = torch.device("cuda")  # the rule only: no CUDA here
    assert engine._prefill_budget(StageDeployConfig()) == 2048
    assert engine._prefill_budget(StageDeployConfig(prefill_chunk=96)) == 96
