"""Step-level continuous batching over a `Denoiser`.

Each call to `step()` admits new requests (their prompts encoded in one batch), then
advances every running request by one denoising step: requests are grouped by size
bucket, and each bucket runs one transformer forward whose rows are every request's
conditional row plus, for requests with guidance > 1, its unconditional row
(classifier-free guidance in the same forward; with `cfg_batching` off, two forwards).
Each request then steps its own scheduler. Finished requests are decoded together per
bucket. A failure inside one bucket fails that bucket's requests only.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import torch

from stages.diffusion.denoiser import Conditioning, Denoiser, concat_conditioning
from stages.diffusion.request import DiffusionRequest
from stages.diffusion.step_cache import CacheState, StepCache


@dataclass
class StepResult:
    advanced: list[DiffusionRequest] = field(default_factory=list)
    finished: list[tuple[DiffusionRequest, np.ndarray]] = field(default_factory=list)
    failed: list[tuple[DiffusionRequest, Exception]] = field(default_factory=list)


class StepBatcher:
    def __init__(self, denoiser: Denoiser, cfg_batching: bool = True, step_cache: float = 0.0):
        self.denoiser = denoiser
        self.cfg_batching = cfg_batching
        self.cache = StepCache(step_cache) if step_cache > 0 else None
        self.running: list[DiffusionRequest] = []
        self.forwards = 0
        """Transformer forwards run so far (for benchmarks)."""

    def admit(self, requests: list[DiffusionRequest]) -> list[tuple[DiffusionRequest, Exception]]:
        """Encode the new requests' prompts in one batch and give each its latents and scheduler."""
        if not requests:
            return []
        try:
            conditional, unconditional = self.denoiser.encode_prompts(
                [r.params.prompt for r in requests], [r.params.negative_prompt for r in requests]
            )
        except Exception as error:  # noqa: BLE001 - a bad prompt batch fails those requests only
            return [(request, error) for request in requests]
        failed = []
        for request, cond, uncond in zip(requests, conditional, unconditional, strict=True):
            try:
                request.conditioning = cond
                request.negative_conditioning = uncond if request.params.do_cfg else None
                self.denoiser.start(request)
                request.cache = CacheState() if self.cache else None
                self.running.append(request)
            except Exception as error:  # noqa: BLE001
                failed.append((request, error))
        return failed

    def remove(self, request_id: str) -> bool:
        before = len(self.running)
        self.running = [r for r in self.running if r.request_id != request_id]
        return len(self.running) != before

    def step(self) -> StepResult:
        result = StepResult()
        buckets: dict[tuple, list[DiffusionRequest]] = defaultdict(list)
        for request in self.running:
            buckets[request.bucket].append(request)
        for requests in buckets.values():
            try:
                self._advance(requests)
                result.advanced.extend(requests)
            except Exception as error:  # noqa: BLE001 - fail this bucket, keep the others
                result.failed.extend((request, error) for request in requests)
        done = [r for r in result.advanced if r.done]
        result.finished, decode_failures = self._decode(done)
        result.failed.extend(decode_failures)
        gone = {r.request_id for r in done} | {r.request_id for r, _ in result.failed}
        self.running = [r for r in self.running if r.request_id not in gone]
        return result

    def _advance(self, requests: list[DiffusionRequest]) -> None:
        inputs = [self.denoiser.model_input(r) for r in requests]
        compute = [self._needs_forward(r, x) for r, x in zip(requests, inputs, strict=True)]
        computed = [(r, x) for r, x, c in zip(requests, inputs, compute, strict=True) if c]
        predictions = self._predict(computed) if computed else {}
        for request, _ in computed:
            request.transformer_calls += 1
        for request in requests:
            noise = predictions.get(request.request_id)
            if noise is None:
                noise = request.cache.prediction
            elif request.cache is not None:
                StepCache.remember(request.cache, noise)
            request.latents = self.denoiser.scheduler_step(request, noise)
            request.step_index += 1

    def _needs_forward(self, request: DiffusionRequest, model_input: torch.Tensor) -> bool:
        if self.cache is None:
            return True
        return self.cache.should_compute(request.cache, model_input, request.step_index, request.total_steps)

    def _predict(self, rows: list[tuple[DiffusionRequest, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """Guided model outputs for each request, from one (or, without CFG batching, two) forwards."""
        guided = [(r, x) for r, x in rows if r.negative_conditioning is not None]
        cond_rows = [(r, x, r.conditioning) for r, x in rows]
        uncond_rows = [(r, x, r.negative_conditioning) for r, x in guided]
        if self.cfg_batching:
            outputs = self._forward(uncond_rows + cond_rows)
            uncond_out, cond_out = outputs[: len(uncond_rows)], outputs[len(uncond_rows) :]
        else:
            cond_out = self._forward(cond_rows)
            uncond_out = self._forward(uncond_rows) if uncond_rows else []
        uncond_by_id = {r.request_id: out for (r, _), out in zip(guided, uncond_out, strict=True)}
        predictions = {}
        for (request, _), cond in zip(rows, cond_out, strict=True):
            uncond = uncond_by_id.get(request.request_id)
            if uncond is not None:
                cond = uncond + request.params.guidance_scale * (cond - uncond)
            predictions[request.request_id] = cond
        return predictions

    def _forward(self, rows: list[tuple[DiffusionRequest, torch.Tensor, Conditioning]]) -> list[torch.Tensor]:
        latents = torch.cat([x for _, x, _ in rows])
        timesteps = torch.stack([r.timesteps[r.step_index] for r, _, _ in rows]).to(latents.device)
        conditioning = concat_conditioning([c for _, _, c in rows])
        output = self.denoiser.predict(latents, timesteps, conditioning)
        self.forwards += 1
        return list(output.split(1))

    def _decode(self, done: list[DiffusionRequest]):
        finished, failed = [], []
        buckets: dict[tuple, list[DiffusionRequest]] = defaultdict(list)
        for request in done:
            buckets[request.bucket].append(request)
        for requests in buckets.values():
            try:
                pixels = self.denoiser.decode(torch.cat([r.latents for r in requests]))
                finished.extend(zip(requests, pixels, strict=True))
            except Exception as error:  # noqa: BLE001
                failed.extend((request, error) for request in requests)
        return finished, failed
