"""One request's state inside the diffusion engine.

In step batching every request owns its scheduler instance (diffusers schedulers are
stateful: `step()` advances a private step index), its generator, latents, timesteps
and step counter, so requests can join and leave the running batch between steps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from stages.diffusion.params import DiffusionParams


@dataclass
class DiffusionRequest:
    request_id: str
    stage_id: int
    params: DiffusionParams
    arrival: float = field(default_factory=time.perf_counter)
    seq: int = 0
    """Number of outputs emitted so far (the next output's `seq`)."""

    # step-batching state, set when the request is admitted
    generator: Any = None
    scheduler: Any = None
    timesteps: Any = None
    latents: Any = None
    conditioning: dict[str, Any] | None = None
    """Per-request transformer inputs with a leading batch dim of 1 (prompt embeds, masks...)."""
    negative_conditioning: dict[str, Any] | None = None
    step_index: int = 0
    cache: Any = None
    """Step-cache state (see step_cache.py), None when caching is off."""
    transformer_calls: int = 0
    """Denoising steps at which the transformer ran for this request (fewer than steps with step caching)."""

    @property
    def total_steps(self) -> int:
        return len(self.timesteps) if self.timesteps is not None else self.params.num_inference_steps

    @property
    def done(self) -> bool:
        return self.timesteps is not None and self.step_index >= len(self.timesteps)

    @property
    def bucket(self) -> tuple[int, int, int]:
        """Requests in one bucket have equal latent shapes, so they share a forward."""
        return (self.params.height, self.params.width, self.params.num_frames)

    def next_seq(self) -> int:
        seq = self.seq
        self.seq += 1
        return seq
