"""The diffusion families through the offline API (stages.Omni): text_to_image, text_to_video,
and AR -> DiT, where the DiT stage renders the text the AR stage wrote."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from diffusion_helpers import load_pipe, tiny_model
from PIL import Image

from stages import Omni
from stages.config import EdgeConfig, PipelineConfig, StageConfig
from stages.models import detect_family, get_family

IMAGE = {"height": 32, "width": 32, "num_inference_steps": 3, "guidance_scale": 4.0, "seed": 7}
GREEDY = {"max_tokens": 12, "temperature": 0}


@pytest.fixture(scope="module")
def ar_to_dit_dir(tmp_path_factory):
    return tiny_model(tmp_path_factory, "ar_to_dit")


def test_text_to_image_through_omni(tmp_path_factory):
    model_dir = tiny_model(tmp_path_factory, "pixart")
    assert detect_family(model_dir) == "text_to_image"
    with Omni(model_dir) as omni:
        result = omni.generate({"prompt": "a red car", "diffusion": IMAGE})[0]
    assert result.finish_reason == "stop"
    ((mime_type, png),) = result.files  # the default output is a PNG file
    assert mime_type == "image/png" and Image.open(io.BytesIO(png)).size == (32, 32)
    assert result.images[0].shape == (32, 32, 3)


def test_text_to_video_through_omni(tmp_path_factory):
    model_dir = tiny_model(tmp_path_factory, "wan")
    assert detect_family(model_dir) == "text_to_video"
    params = {"height": 32, "width": 32, "num_frames": 5, "num_inference_steps": 2, "output_format": "np", "seed": 1}
    with Omni(model_dir) as omni:
        result = omni.generate({"prompt": "waves", "diffusion": params})[0]
    assert result.video.shape == (5, 32, 32, 3)


def test_ar_to_dit_renders_the_prompt_the_llm_wrote(ar_to_dit_dir):
    assert detect_family(ar_to_dit_dir) == "ar_to_dit"
    params = {**IMAGE, "output_format": "np"}
    with Omni(ar_to_dit_dir) as omni:
        cat, dog = omni.generate(
            [
                {"messages": [{"role": "user", "content": "draw a cat on a chair"}], "diffusion": params},
                {"messages": [{"role": "user", "content": "a dog in the snow, please"}], "diffusion": params},
            ],
            GREEDY,
        )
    assert cat.text and dog.text and cat.text != dog.text
    assert len(cat.images) == len(dog.images) == 1
    # the DiT stage rendered exactly the AR stage's text: diffusers' SD3 on that text gives the same image
    pipe = load_pipe(ar_to_dit_dir / "dit")
    for result in (cat, dog):
        expected = pipe(
            result.text,
            negative_prompt="",
            height=32,
            width=32,
            num_inference_steps=3,
            guidance_scale=4.0,
            generator=torch.Generator("cpu").manual_seed(7),
            output_type="np",
        ).images[0]
        np.testing.assert_allclose(result.images[0], expected, atol=1e-4)
    # same seed, different written prompt -> a different image
    assert np.abs(cat.images[0] - dog.images[0]).max() > 1e-3


def test_ar_to_dit_pipeline_shape_and_state_carrying_edges():
    pipeline = get_family("ar_to_dit").pipeline
    assert [s.kind for s in pipeline.stages] == ["ar", "diffusion"]
    assert pipeline.edges[0].carries == "text"
    assert pipeline.output_modalities == ["text", "image"]
    for carries in ("hidden", "kv"):  # a DiT that reads the AR stage's states
        variant = PipelineConfig(
            family="ar_to_dit",
            name=f"ar_to_dit_{carries}",
            stages=pipeline.stages,
            edges=[EdgeConfig(source=0, target=1, carries=carries, streaming=True)],
        )
        assert variant.edges[0].carries == carries
    assert get_family("text_to_image").pipeline.stages == [
        StageConfig(id=0, name="dit", kind="diffusion", output="image", default_backend="diffusers", init_image=True)
    ]
    assert not get_family("ar_to_dit").pipeline.entry_stage.init_image
