"""Wan 2.1 text-to-video (3D DiT, UMT5, causal video VAE) for step batching; mirrors WanPipeline.__call__.

Wan 2.2's two-expert (`boundary_ratio`) and per-token-timestep (`expand_timesteps`) variants
are not covered: `supports()` sends them to request batching.
"""

from __future__ import annotations

import numpy as np
import torch

from stages.diffusion.denoiser import Conditioning, Denoiser, split_rows
from stages.diffusion.params import PipelineTraits
from stages.diffusion.request import DiffusionRequest

MAX_SEQUENCE_LENGTH = 512  # the pipeline's default UMT5 length


class WanDenoiser(Denoiser):
    @staticmethod
    def supports(pipe) -> bool:
        return pipe.config.boundary_ratio is None and not pipe.config.expand_timesteps and pipe.transformer is not None

    def traits(self) -> PipelineTraits:
        pipe = self.pipe
        return PipelineTraits(
            size_multiple=pipe.vae_scale_factor_spatial * pipe.transformer.config.patch_size[-1],
            default_height=480,
            default_width=832,
            default_steps=50,
            default_guidance=5.0,
            is_video=True,
            frame_multiple=pipe.vae_scale_factor_temporal,
            default_frames=81,
        )

    def encode_prompts(self, prompts: list[str], negatives: list[str]) -> tuple[list[Conditioning], list[Conditioning]]:
        embeds, negative_embeds = self.pipe.encode_prompt(
            prompt=prompts,
            negative_prompt=negatives,
            do_classifier_free_guidance=True,
            max_sequence_length=MAX_SEQUENCE_LENGTH,
            device=self.device,
        )
        count = len(prompts)
        conditional = [{"encoder_hidden_states": e.to(self.dtype)} for e in split_rows(embeds, count)]
        unconditional = [{"encoder_hidden_states": e.to(self.dtype)} for e in split_rows(negative_embeds, count)]
        return conditional, unconditional

    def start(self, request: DiffusionRequest) -> None:
        pipe, params = self.pipe, request.params
        request.generator = self.new_generator(params.seed)
        request.scheduler = self.new_scheduler()
        request.scheduler.set_timesteps(params.num_inference_steps, device=self.device)
        request.scheduler.set_begin_index(0)
        request.timesteps = request.scheduler.timesteps
        request.latents = pipe.prepare_latents(
            1,
            pipe.transformer.config.in_channels,
            params.height,
            params.width,
            params.num_frames,
            torch.float32,
            self.device,
            request.generator,
        )

    def model_input(self, request: DiffusionRequest) -> torch.Tensor:
        return request.latents.to(self.dtype)

    def predict(self, latents: torch.Tensor, timesteps: torch.Tensor, conditioning: Conditioning) -> torch.Tensor:
        return self.pipe.transformer(
            hidden_states=latents,
            timestep=timesteps,
            encoder_hidden_states=conditioning["encoder_hidden_states"],
            return_dict=False,
        )[0]

    def decode(self, latents: torch.Tensor) -> np.ndarray:
        vae = self.pipe.vae
        latents = latents.to(vae.dtype)
        shape = (1, vae.config.z_dim, 1, 1, 1)
        mean = torch.tensor(vae.config.latents_mean).view(shape).to(latents.device, latents.dtype)
        inverse_std = 1.0 / torch.tensor(vae.config.latents_std).view(shape).to(latents.device, latents.dtype)
        video = vae.decode(latents / inverse_std + mean, return_dict=False)[0]
        return self.pipe.video_processor.postprocess_video(video, output_type="np")
