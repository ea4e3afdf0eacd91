"""The `text_to_video` family: one diffusion stage, prompt in, MP4 video out (e.g. Wan 2.1).

Video pipelines run with request batching (compatible requests share one pipeline call).
Per-request parameters as for text_to_image, plus `num_frames`; `output_format` is "mp4"
(H.264) or "np" (raw float frames).
"""

from __future__ import annotations

from pathlib import Path

from stages.config import PipelineConfig, StageConfig, StageDeployConfig
from stages.engine import StageEngine
from stages.errors import ConfigError
from stages.models import DEFAULT_VARIANT, ModelFamily
from stages.models.text_to_image import build_diffusion_engine

STAGE_NAME = "dit"

PIPELINE = PipelineConfig(
    family="text_to_video",
    name="text_to_video",
    description="One diffusion transformer stage: a text prompt in, a video out.",
    stages=[StageConfig(id=0, name=STAGE_NAME, kind="diffusion", output="video", default_backend="diffusers")],
    # Wan's, CogVideoX's and HunyuanVideo's VAEs compress time by 4 (4k + 1 frames; the loaded engine checks
    # the checkpoint's own factor, 8 for LTX); 17 frames, about a second, suits both
    frame_multiple=4,
    request_defaults={"num_frames": 17},
)


class TextToVideoFamily(ModelFamily):
    name = "text_to_video"
    pipelines = {DEFAULT_VARIANT: PIPELINE}
    model_types = ("WanPipeline", "CogVideoXPipeline", "LTXPipeline", "HunyuanVideoPipeline")

    def build_engine(self, stage_name: str, model_dir: str | Path, stage_deploy: StageDeployConfig) -> StageEngine:
        if stage_name != STAGE_NAME:
            raise ConfigError("stage", f"the text_to_video pipeline has one stage {STAGE_NAME!r}, not {stage_name!r}")
        return build_diffusion_engine(stage_name, model_dir, stage_deploy)


family = TextToVideoFamily()
