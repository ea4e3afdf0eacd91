"""Whole-request batching: compatible requests share one call of the pipeline's own `__call__`.

Compatible means the same size, frame count, steps and guidance (`DiffusionParams.batch_key`);
each request keeps its own prompt, negative prompt and seed (one generator per prompt, which
diffusers' `prepare_latents` honours row by row). Works for any diffusers text-to-image or
text-to-video pipeline; with `max_batch=1` it is one pipeline call at a time.

Edits (same strength too, by the batch key) call `edit_pipe`, the family's img2img pipeline over
the same components (image_to_image.py), with each request's input image.
"""

from __future__ import annotations

import inspect
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch

from stages.diffusion.params import PipelineTraits
from stages.diffusion.request import DiffusionRequest


@dataclass
class BatchResult:
    requests: list[DiffusionRequest]
    pixels: list[np.ndarray] = field(default_factory=list)
    progress_steps: int = 0
    """Denoising steps the call reported through its step callback (0 if it has none)."""


class RequestBatcher:
    def __init__(self, pipe, traits: PipelineTraits, max_batch: int, edit_pipe=None):
        self.pipe = pipe
        self.edit_pipe = edit_pipe
        """The img2img pipeline for edits, or None when this family cannot edit."""
        self.traits = traits
        self.max_batch = max_batch

    def take_batch(self, waiting: deque[DiffusionRequest]) -> list[DiffusionRequest]:
        """The oldest waiting request and the compatible ones after it (removed from `waiting`)."""
        first = waiting.popleft()
        batch = [first]
        key = first.params.batch_key()
        for request in list(waiting):
            if len(batch) >= self.max_batch:
                break
            if request.params.batch_key() == key:
                waiting.remove(request)
                batch.append(request)
        return batch

    def run(self, batch: list[DiffusionRequest]) -> BatchResult:
        result = BatchResult(batch)
        pipe = self.edit_pipe if batch[0].params.is_edit else self.pipe
        accepts = set(inspect.signature(pipe.__call__).parameters)
        kwargs = self._call_kwargs(batch, accepts)
        if "callback_on_step_end" in accepts:

            def count_step(_pipe, step, timestep, callback_kwargs):
                result.progress_steps += 1
                return {}

            kwargs["callback_on_step_end"] = count_step
        output = pipe(**kwargs)
        pixels = output.frames if self.traits.is_video else output.images
        result.pixels = [np.asarray(p) for p in pixels]
        return result

    def _call_kwargs(self, batch: list[DiffusionRequest], accepts: set[str]) -> dict:
        first = batch[0].params
        kwargs = {
            "prompt": [r.params.prompt for r in batch],
            "negative_prompt": [r.params.negative_prompt for r in batch],
            "height": first.height,
            "width": first.width,
            "num_inference_steps": first.num_inference_steps,
            "guidance_scale": first.guidance_scale,
            "generator": [torch.Generator("cpu").manual_seed(r.params.seed) for r in batch],
            "output_type": "np",
        }
        if self.traits.is_video:
            kwargs["num_frames"] = first.num_frames
        if first.is_edit:
            kwargs["image"] = [r.params.init_image for r in batch]
            kwargs["strength"] = first.strength
        for switch in ("use_resolution_binning", "clean_caption"):
            if switch in accepts:
                kwargs[switch] = False
        return kwargs
