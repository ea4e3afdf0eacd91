"""PixArt-Sigma (DiT with adaLN-single, T5, DPM-Solver++) for step batching; mirrors PixArtSigmaPipeline.__call__.

Resolution binning is off (the engine renders exactly the asked size), as with
`use_resolution_binning=False` on the pipeline.
"""

from __future__ import annotations

import numpy as np
import torch
from diffusers.pipelines.pixart_alpha.pipeline_pixart_sigma import retrieve_timesteps

from stages.diffusion.denoiser import Conditioning, Denoiser, split_rows
from stages.diffusion.params import PipelineTraits
from stages.diffusion.request import DiffusionRequest

MAX_SEQUENCE_LENGTH = 300  # the pipeline's default T5 length


class PixArtDenoiser(Denoiser):
    def traits(self) -> PipelineTraits:
        pipe = self.pipe
        default_size = pipe.transformer.config.sample_size * pipe.vae_scale_factor
        return PipelineTraits(
            size_multiple=pipe.vae_scale_factor * pipe.transformer.config.patch_size,
            default_height=default_size,
            default_width=default_size,
            default_steps=20,
            default_guidance=4.5,
        )

    def encode_prompts(self, prompts: list[str], negatives: list[str]) -> tuple[list[Conditioning], list[Conditioning]]:
        embeds, mask, negative_embeds, negative_mask = self.pipe.encode_prompt(
            prompts,
            do_classifier_free_guidance=True,
            negative_prompt=negatives,
            device=self.device,
            clean_caption=False,
            max_sequence_length=MAX_SEQUENCE_LENGTH,
        )
        count = len(prompts)
        conditional = [
            {"encoder_hidden_states": e, "encoder_attention_mask": m}
            for e, m in zip(split_rows(embeds, count), split_rows(mask, count), strict=True)
        ]
        unconditional = [
            {"encoder_hidden_states": e, "encoder_attention_mask": m}
            for e, m in zip(split_rows(negative_embeds, count), split_rows(negative_mask, count), strict=True)
        ]
        return conditional, unconditional

    def start(self, request: DiffusionRequest) -> None:
        pipe, params = self.pipe, request.params
        request.generator = self.new_generator(params.seed)
        request.scheduler = self.new_scheduler()
        request.timesteps, _ = retrieve_timesteps(request.scheduler, params.num_inference_steps, self.device)
        latents = pipe.prepare_latents(
            1,
            pipe.transformer.config.in_channels,
            params.height,
            params.width,
            self.dtype,
            self.device,
            request.generator,
        )
        # prepare_latents scales by the pipeline's scheduler; use the request's own (same config)
        request.latents = latents * request.scheduler.init_noise_sigma / pipe.scheduler.init_noise_sigma

    def model_input(self, request: DiffusionRequest) -> torch.Tensor:
        return request.scheduler.scale_model_input(request.latents, request.timesteps[request.step_index])

    def predict(self, latents: torch.Tensor, timesteps: torch.Tensor, conditioning: Conditioning) -> torch.Tensor:
        transformer = self.pipe.transformer
        noise = transformer(
            latents,
            encoder_hidden_states=conditioning["encoder_hidden_states"],
            encoder_attention_mask=conditioning["encoder_attention_mask"],
            timestep=timesteps,
            added_cond_kwargs={"resolution": None, "aspect_ratio": None},
            return_dict=False,
        )[0]
        if transformer.config.out_channels // 2 == transformer.config.in_channels:
            noise = noise.chunk(2, dim=1)[0]  # drop the learned variance
        return noise

    def scheduler_step(self, request: DiffusionRequest, noise: torch.Tensor) -> torch.Tensor:
        timestep = request.timesteps[request.step_index]
        step = request.scheduler.step(noise, timestep, request.latents, generator=request.generator, return_dict=False)
        return step[0]

    def decode(self, latents: torch.Tensor) -> np.ndarray:
        vae = self.pipe.vae
        image = vae.decode(latents.to(vae.dtype) / vae.config.scaling_factor, return_dict=False)[0]
        return self.pipe.image_processor.postprocess(image, output_type="np")
