"""A transformer + scheduler + VAE pipeline taken apart into the pieces step batching needs.

diffusers pipelines run the whole denoising loop inside `__call__`. Step batching needs
the loop unrolled: encode prompts once, prepare each request's latents and scheduler,
run one transformer forward over many requests' rows, step each request's own
scheduler, decode. A `Denoiser` does those pieces for one pipeline family, reusing the
pipeline's own helpers (`encode_prompt`, `prepare_latents`, its VAE and image processor)
so the numbers match the pipeline's `__call__`. A denoiser with `supports_edits` also
starts requests from an input image (image-to-image, image_to_image.py), matching the
family's diffusers img2img pipeline.

Families with a denoiser: `DENOISERS` (pipeline class name -> "module:class"). Other
pipelines run through whole-request batching.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import Any

import numpy as np
import torch

from stages.diffusion.params import PipelineTraits
from stages.diffusion.request import DiffusionRequest

DENOISERS: dict[str, str] = {
    "StableDiffusion3Pipeline": "stages.diffusion.sd3_denoiser:SD3Denoiser",
    "PixArtSigmaPipeline": "stages.diffusion.pixart_denoiser:PixArtDenoiser",
    "WanPipeline": "stages.diffusion.wan_denoiser:WanDenoiser",
}

Conditioning = dict[str, torch.Tensor]


def make_denoiser(pipe) -> Denoiser | None:
    """The denoiser for `pipe`'s class, or None when it only runs whole-request batching."""
    target = DENOISERS.get(type(pipe).__name__)
    if target is None:
        return None
    module_name, _, class_name = target.partition(":")
    denoiser_class = getattr(importlib.import_module(module_name), class_name)
    return denoiser_class(pipe) if denoiser_class.supports(pipe) else None


class Denoiser(ABC):
    supports_edits = False
    """Whether `start` can begin a request from its input image (`params.init_image`)."""

    def __init__(self, pipe):
        self.pipe = pipe
        self.device = pipe._execution_device
        self.dtype = pipe.transformer.dtype

    @staticmethod
    def supports(pipe) -> bool:
        """Whether this pipeline instance's configuration is one the denoiser reproduces."""
        return True

    @abstractmethod
    def traits(self) -> PipelineTraits:
        """Size rules and defaults of this pipeline."""

    @abstractmethod
    def encode_prompts(self, prompts: list[str], negatives: list[str]) -> tuple[list[Conditioning], list[Conditioning]]:
        """Per-request conditional and unconditional transformer inputs (leading batch dim 1)."""

    @abstractmethod
    def start(self, request: DiffusionRequest) -> None:
        """Give the request its generator, scheduler, timesteps and initial latents (noise, or for an
        edit its noised image and the rest of the schedule)."""

    @abstractmethod
    def predict(self, latents: torch.Tensor, timesteps: torch.Tensor, conditioning: Conditioning) -> torch.Tensor:
        """One batched transformer forward: the model output for each row, as the scheduler expects it."""

    @abstractmethod
    def decode(self, latents: torch.Tensor) -> np.ndarray:
        """Final latents of a bucket to float pixels in [0, 1], shape [B, H, W, 3]."""

    def model_input(self, request: DiffusionRequest) -> torch.Tensor:
        return request.latents

    def scheduler_step(self, request: DiffusionRequest, noise: torch.Tensor) -> torch.Tensor:
        timestep = request.timesteps[request.step_index]
        return request.scheduler.step(noise, timestep, request.latents, return_dict=False)[0]

    def new_scheduler(self):
        scheduler = self.pipe.scheduler
        return type(scheduler).from_config(scheduler.config)

    def new_generator(self, seed: int) -> torch.Generator:
        """CPU generators, as in diffusers' examples: the same seed gives the same image on any device."""
        return torch.Generator("cpu").manual_seed(seed)


def concat_conditioning(rows: list[Conditioning]) -> Conditioning:
    return {key: torch.cat([row[key] for row in rows]) for key in rows[0]}


def split_rows(batch: Any, count: int) -> list[Any]:
    """Row i of every tensor in a batched encode_prompt result, keeping the batch dim."""
    return [batch[index : index + 1] for index in range(count)]
