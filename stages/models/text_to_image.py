"""The `text_to_image` family: one diffusion (DiT) stage, prompt in, image out.

Serves diffusers text-to-image pipelines from a local directory: SD3 and PixArt-Sigma
with step-level continuous batching, any other (Flux, Sana, ...) with request batching.
Per-request knobs travel typed in `StageRequest.options.diffusion` (height, width,
num_inference_steps, guidance_scale, negative_prompt, seed, output_format, num_frames, fps;
stages/diffusion_knobs.py); the stage's deploy `options` switch batching and accelerations
(stages/diffusion/options.py).

The stage also edits images (image-to-image: an input image in `payloads["image"]`,
`options.diffusion.strength`, stages/diffusion/image_to_image.py) for checkpoints whose family
has an img2img pipeline in diffusers: SD3 (step and request batching), Flux and the
like (request batching). PixArt-Sigma has none and refuses edits naming `image`.
"""

from __future__ import annotations

from pathlib import Path

from stages.config import PipelineConfig, StageConfig, StageDeployConfig
from stages.engine import StageEngine
from stages.errors import ConfigError
from stages.models import DEFAULT_VARIANT, ModelFamily

STAGE_NAME = "dit"

PIPELINE = PipelineConfig(
    family="text_to_image",
    name="text_to_image",
    description="One diffusion transformer stage: a text prompt in, an image out.",
    stages=[
        StageConfig(
            id=0, name=STAGE_NAME, kind="diffusion", output="image", default_backend="diffusers", init_image=True
        )
    ],
)


def build_diffusion_engine(stage_name: str, model_dir: str | Path, stage_deploy: StageDeployConfig) -> StageEngine:
    backend = stage_deploy.backend or "diffusers"
    if backend != "diffusers":
        raise ConfigError(f"stages.{stage_name}.backend", f"a diffusion stage runs on 'diffusers', not {backend!r}")
    from stages.diffusion.engine import DiffusionEngine

    return DiffusionEngine.from_pretrained(model_dir, stage_deploy)


class TextToImageFamily(ModelFamily):
    name = "text_to_image"
    pipelines = {DEFAULT_VARIANT: PIPELINE}
    model_types = (
        "StableDiffusion3Pipeline",
        "PixArtSigmaPipeline",
        "PixArtAlphaPipeline",
        "FluxPipeline",
        "SanaPipeline",
    )

    def build_engine(self, stage_name: str, model_dir: str | Path, stage_deploy: StageDeployConfig) -> StageEngine:
        if stage_name != STAGE_NAME:
            raise ConfigError("stage", f"the text_to_image pipeline has one stage {STAGE_NAME!r}, not {stage_name!r}")
        return build_diffusion_engine(stage_name, model_dir, stage_deploy)


family = TextToImageFamily()
