"""Stable Diffusion 3 (MMDiT, flow matching) for step batching; mirrors StableDiffusion3Pipeline.__call__
and, for edits, StableDiffusion3Img2ImgPipeline.__call__."""

from __future__ import annotations

import numpy as np
import torch
from diffusers.pipelines.stable_diffusion_3.pipeline_stable_diffusion_3 import calculate_shift, retrieve_timesteps
from diffusers.pipelines.stable_diffusion_3.pipeline_stable_diffusion_3_img2img import retrieve_latents
from diffusers.utils.torch_utils import randn_tensor

from stages.diffusion.denoiser import Conditioning, Denoiser, split_rows
from stages.diffusion.image_to_image import skip_to_strength
from stages.diffusion.params import PipelineTraits
from stages.diffusion.request import DiffusionRequest

MAX_SEQUENCE_LENGTH = 256  # the pipeline's default T5 length; every prompt pads to it


class SD3Denoiser(Denoiser):
    supports_edits = True

    def traits(self) -> PipelineTraits:
        pipe = self.pipe
        default_size = pipe.default_sample_size * pipe.vae_scale_factor
        return PipelineTraits(
            size_multiple=pipe.vae_scale_factor * pipe.patch_size,
            default_height=default_size,
            default_width=default_size,
            default_steps=28,
            default_guidance=7.0,
        )

    def encode_prompts(self, prompts: list[str], negatives: list[str]) -> tuple[list[Conditioning], list[Conditioning]]:
        embeds, negative_embeds, pooled, negative_pooled = self.pipe.encode_prompt(
            prompt=prompts,
            prompt_2=None,
            prompt_3=None,
            negative_prompt=negatives,
            do_classifier_free_guidance=True,
            device=self.device,
            max_sequence_length=MAX_SEQUENCE_LENGTH,
        )
        count = len(prompts)
        conditional = [
            {"encoder_hidden_states": e, "pooled_projections": p}
            for e, p in zip(split_rows(embeds, count), split_rows(pooled, count), strict=True)
        ]
        unconditional = [
            {"encoder_hidden_states": e, "pooled_projections": p}
            for e, p in zip(split_rows(negative_embeds, count), split_rows(negative_pooled, count), strict=True)
        ]
        return conditional, unconditional

    def start(self, request: DiffusionRequest) -> None:
        params = request.params
        request.generator = self.new_generator(params.seed)
        request.scheduler = self.new_scheduler()
        request.timesteps, _ = retrieve_timesteps(
            request.scheduler, params.num_inference_steps, self.device, **self._shift_kwargs(request)
        )
        if params.is_edit:
            self._start_from_image(request)
            return
        pipe = self.pipe
        request.latents = pipe.prepare_latents(
            1,
            pipe.transformer.config.in_channels,
            params.height,
            params.width,
            self.dtype,
            self.device,
            request.generator,
        )

    def _start_from_image(self, request: DiffusionRequest) -> None:
        """The img2img pipeline's `get_timesteps` and `prepare_latents`, on the request's own scheduler."""
        params, vae = request.params, self.pipe.vae
        request.timesteps = skip_to_strength(request.scheduler, params.num_inference_steps, params.strength)
        image = self.pipe.image_processor.preprocess(params.init_image, height=params.height, width=params.width)
        image = image.to(device=self.device, dtype=self.dtype)
        image_latents = retrieve_latents(vae.encode(image), generator=request.generator)
        image_latents = (image_latents - vae.config.shift_factor) * vae.config.scaling_factor
        noise = randn_tensor(image_latents.shape, generator=request.generator, device=self.device, dtype=self.dtype)
        request.latents = request.scheduler.scale_noise(image_latents, request.timesteps[:1], noise).to(self.dtype)

    def _shift_kwargs(self, request: DiffusionRequest) -> dict:
        config = self.pipe.scheduler.config
        if not config.get("use_dynamic_shifting", None):
            return {}
        pipe, params = self.pipe, request.params
        patch = pipe.transformer.config.patch_size
        latent_height, latent_width = params.height // pipe.vae_scale_factor, params.width // pipe.vae_scale_factor
        mu = calculate_shift(
            (latent_height // patch) * (latent_width // patch),
            config.get("base_image_seq_len", 256),
            config.get("max_image_seq_len", 4096),
            config.get("base_shift", 0.5),
            config.get("max_shift", 1.16),
        )
        return {"mu": mu}

    def predict(self, latents: torch.Tensor, timesteps: torch.Tensor, conditioning: Conditioning) -> torch.Tensor:
        return self.pipe.transformer(
            hidden_states=latents,
            timestep=timesteps,
            encoder_hidden_states=conditioning["encoder_hidden_states"],
            pooled_projections=conditioning["pooled_projections"],
            return_dict=False,
        )[0]

    def decode(self, latents: torch.Tensor) -> np.ndarray:
        vae = self.pipe.vae
        latents = (latents / vae.config.scaling_factor) + vae.config.shift_factor
        image = vae.decode(latents, return_dict=False)[0]
        return self.pipe.image_processor.postprocess(image, output_type="np")
