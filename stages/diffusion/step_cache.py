"""TeaCache-style step caching, per request.

Between neighbouring denoising steps the transformer's input changes little, and so does
its output. Like TeaCache, each request accumulates the relative L1 change of its model
input since the last step the transformer really ran; while the sum stays below the
threshold, the request skips the transformer (all of its blocks) and reuses its last
prediction. The first and the last step always run. Because the decision is per request,
skipped requests simply leave the batched forward of that step.

TeaCache measures the change of the timestep-modulated input of the first block and
rescales it with a fitted polynomial; this uses the latents themselves, which needs no
per-model hooks and works for every denoiser. Typical thresholds: 0.05 (mild) to 0.3.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class CacheState:
    previous_input: torch.Tensor | None = None
    accumulated: float = 0.0
    prediction: torch.Tensor | None = None
    skipped: int = 0


class StepCache:
    def __init__(self, threshold: float):
        self.threshold = threshold

    def should_compute(self, state: CacheState, model_input: torch.Tensor, step_index: int, total_steps: int) -> bool:
        """Whether the request must run the transformer at this step (False: reuse `state.prediction`)."""
        previous = state.previous_input
        state.previous_input = model_input
        if previous is None or state.prediction is None or step_index >= total_steps - 1:
            state.accumulated = 0.0
            return True
        change = (model_input - previous).abs().mean() / previous.abs().mean().clamp_min(1e-8)
        state.accumulated += float(change)
        if state.accumulated < self.threshold:
            state.skipped += 1
            return False
        state.accumulated = 0.0
        return True

    @staticmethod
    def remember(state: CacheState, prediction: torch.Tensor) -> None:
        state.prediction = prediction
