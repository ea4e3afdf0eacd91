"""The diffusion knobs of the /v1 routes, converted and checked once at the edge: good values become
the request's `RequestOptions.diffusion`, each bad value a 400 naming its field."""

from __future__ import annotations

import pytest

from control_plane.inference.errors import ApiError
from control_plane.openai_compat.bodies import convert
from control_plane.openai_compat.chat import ChatRequest
from control_plane.openai_compat.image_edits import ImageEditRequest, validate_edit
from control_plane.openai_compat.images import ImageRequest, validate
from control_plane.openai_compat.knobs import body_knobs, request_knobs
from control_plane.openai_compat.videos import VideoRequest, video_knobs
from stages.diffusion_knobs import DiffusionKnobs


def image(**fields) -> ImageRequest:
    return ImageRequest(model="m", prompt="a cat", **fields)


def test_an_image_body_becomes_typed_knobs():
    knobs = validate(image(size="64x32", num_inference_steps=4, guidance_scale=2, negative_prompt="dark", seed=3,
                           output_format="jpg"))  # fmt: skip
    assert knobs == DiffusionKnobs(width=64, height=32, num_inference_steps=4, guidance_scale=2.0,
                                   negative_prompt="dark", seed=3, output_format="jpeg")  # fmt: skip
    assert validate(image()).fields() == {"output_format": "png"}  # the rest: the deployment's defaults


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"size": "huge"}, "size"),
        ({"num_inference_steps": 0}, "num_inference_steps"),
        ({"num_inference_steps": 201}, "num_inference_steps"),
        ({"guidance_scale": -1.0}, "guidance_scale"),
        ({"guidance_scale": 31.0}, "guidance_scale"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**63 - 1}, "seed"),  # n images take seed .. seed + n - 1
        ({"output_format": "bmp"}, "output_format"),
    ],
)
def test_each_bad_image_value_is_a_400_naming_it(fields, param):
    with pytest.raises(ApiError) as raised:
        validate(image(**fields))
    assert (raised.value.status, raised.value.param) == (400, param)


def test_an_edit_takes_a_strength_in_0_1():
    edit = convert({"model": "m", "prompt": "a cat", "strength": "0.5", "seed": "4"}, ImageEditRequest, strict=False)
    assert validate_edit(edit).fields() == {"output_format": "png", "strength": 0.5, "seed": 4}
    for strength in (0.0, 1.5, float("nan")):
        with pytest.raises(ApiError) as raised:
            validate_edit(ImageEditRequest(model="m", prompt="a cat", strength=strength))
        assert (raised.value.status, raised.value.param) == (400, "strength")


def test_a_video_body_becomes_typed_knobs():
    knobs = video_knobs(VideoRequest(model="m", prompt="waves", seconds="2", fps=8, size="32x32", seed=1))
    assert knobs == DiffusionKnobs(width=32, height=32, num_frames=17, fps=8, seed=1, output_format="mp4")
    assert video_knobs(VideoRequest(model="m", prompt="waves", num_frames=5)).num_frames == 5


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"fps": 500}, "fps"),
        ({"num_frames": 0}, "num_frames"),
        ({"seconds": "four"}, "seconds"),
        ({"num_inference_steps": 0}, "num_inference_steps"),
        ({"guidance_scale": -2.0}, "guidance_scale"),
        ({"seed": 2**63}, "seed"),
        ({"negative_prompt": ""}, None),
    ],
)
def test_each_bad_video_value_is_a_400_naming_it(fields, param):
    body = VideoRequest(model="m", prompt="waves", **fields)
    if param is None:
        assert video_knobs(body).negative_prompt == ""
        return
    with pytest.raises(ApiError) as raised:
        video_knobs(body)
    assert (raised.value.status, raised.value.param) == (400, param)


def test_a_chat_body_sets_knobs_under_its_diffusion_stage_entry():
    body = ChatRequest(model="m", messages=[], size="64x64", height=32, seed=9, guidance_scale=3.0)
    assert body_knobs(body) == {"width": 64, "height": 32, "seed": 9, "guidance_scale": 3.0}
    knobs = request_knobs(body_knobs(body), {"seed": 10, "num_inference_steps": 2})
    assert (knobs.width, knobs.height, knobs.seed, knobs.num_inference_steps) == (64, 32, 10, 2)
    with pytest.raises(ApiError) as raised:
        request_knobs(body_knobs(ChatRequest(model="m", messages=[], num_inference_steps=0)))
    assert (raised.value.status, raised.value.param) == (400, "num_inference_steps")
    assert "num_inference_steps" in raised.value.message
