"""Image edits (image-to-image): the engine's edited images equal diffusers' own
StableDiffusion3Img2ImgPipeline `__call__` for the same seed, input image and strength, in
step batching (edits of different strengths and steps join the running batch mid-schedule,
beside a text-to-image request) and in request batching. Then the edit parameters'
checks, and the families that cannot edit."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from diffusion_helpers import drive, final, load_pipe, request, tiny_model
from PIL import Image

from stages import Omni
from stages.diffusion.engine import DiffusionEngine
from stages.diffusion.media import bytes_payload, payload_array
from stages.diffusion.options import DiffusionOptions
from stages.errors import InvalidRequest
from stages.protocol import StageRequest, Tensor

ATOL = 1e-4


@pytest.fixture(scope="module")
def sd3_dir(tmp_path_factory):
    return tiny_model(tmp_path_factory, "sd3")


@pytest.fixture(scope="module")
def pipe(sd3_dir):
    return load_pipe(sd3_dir)


@pytest.fixture(scope="module")
def img2img(sd3_dir):
    """diffusers' own img2img pipeline, loaded on its own from the same checkpoint."""
    from diffusers import StableDiffusion3Img2ImgPipeline

    reference = StableDiffusion3Img2ImgPipeline.from_pretrained(str(sd3_dir))
    reference.set_progress_bar_config(disable=True)
    return reference


def picture(width: int, height: int, phase: float = 0.0) -> Image.Image:
    """A smooth test picture (colour waves and a ramp), different for each phase."""
    ys, xs = np.mgrid[0:height, 0:width]
    red = (np.sin(xs / 5 + phase) + 1) / 2
    green = ys / max(height - 1, 1)
    blue = (np.cos((xs + ys) / 7 - phase) + 1) / 2
    return Image.fromarray((np.stack([red, green, blue], -1) * 255).astype(np.uint8))


def png_of(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def edit(request_id: str, prompt: str, image: Image.Image, **params) -> StageRequest:
    stage_request = request(request_id, prompt, **params)
    stage_request.payloads = {"image": bytes_payload(png_of(image))}
    return stage_request


def reference_edit(img2img, prompt: str, image: Image.Image, params: dict) -> np.ndarray:
    return img2img(
        prompt,
        image=image,
        strength=params["strength"],
        negative_prompt=params.get("negative_prompt", ""),
        height=params["height"],
        width=params["width"],
        num_inference_steps=params["num_inference_steps"],
        guidance_scale=params["guidance_scale"],
        generator=torch.Generator("cpu").manual_seed(params["seed"]),
        output_type="np",
    ).images[0]


def image_of(outputs) -> np.ndarray:
    output = final(outputs)
    assert output.error is None, output.error
    return payload_array(output.payloads["image"])


EDITS = [
    (
        "a cat sitting on a red chair",
        picture(64, 48),
        dict(height=48, width=64, num_inference_steps=6, guidance_scale=4.5, seed=1, strength=0.5),
    ),
    (
        "a lighthouse at dusk",
        picture(70, 52, phase=1.0),  # resized to the asked size, as the pipeline does
        dict(
            height=48,
            width=64,
            num_inference_steps=5,
            guidance_scale=7.0,
            seed=2,
            strength=0.7,
            negative_prompt="blurry",
        ),
    ),
]
TEXT = ("a dog on the beach", dict(height=48, width=64, num_inference_steps=5, guidance_scale=4.0, seed=3))


def test_step_batched_edits_join_mid_schedule_and_match_diffusers_img2img(pipe, img2img):
    engine = DiffusionEngine(pipe, DiffusionOptions(batching="step"), max_batch=8)
    (cat_prompt, cat_image, cat), (light_prompt, light_image, light) = EDITS
    arrivals = {
        0: [request("text", TEXT[0], **TEXT[1])],
        1: [edit("cat", cat_prompt, cat_image, **cat)],
        2: [edit("light", light_prompt, light_image, **light)],
    }
    outputs = drive(engine, arrivals)
    for request_id, (prompt, image, params) in zip(["cat", "light"], EDITS, strict=True):
        got = image_of(outputs[request_id])
        assert got.shape == (48, 64, 3)
        np.testing.assert_allclose(got, reference_edit(img2img, prompt, image, params), atol=ATOL)
        assert final(outputs[request_id]).params["strength"] == params["strength"]
    text_alone = pipe(
        TEXT[0], negative_prompt="", generator=torch.Generator("cpu").manual_seed(3), output_type="np",
        **{k: v for k, v in TEXT[1].items() if k != "seed"},
    ).images[0]  # fmt: skip
    np.testing.assert_allclose(image_of(outputs["text"]), text_alone, atol=ATOL)
    # strength 0.5 of 6 steps runs the last 3; 0.7 of 5 skips int(5 - 3.5) = 1 and runs 4
    assert [o.params["step"] for o in outputs["cat"] if not o.finished] == [1, 2, 3]
    assert [o.params["total_steps"] for o in outputs["light"] if not o.finished] == [4, 4, 4, 4]
    # one bucket (48x64): the three requests shared transformer forwards while they ran together
    assert engine.step_batcher.forwards < 5 + 3 + 4


def test_request_batched_edits_match_diffusers_img2img(pipe, img2img):
    shared = dict(height=32, width=32, num_inference_steps=4, guidance_scale=5.0, strength=0.6)
    inputs = [("a red car", picture(32, 32)), ("an owl at night", picture(40, 40, phase=2.0))]
    batch = [edit(f"e{i}", prompt, image, seed=10 + i, **shared) for i, (prompt, image) in enumerate(inputs)]
    stronger = edit("strong", "a cup of coffee", picture(32, 32), seed=20, **{**shared, "strength": 0.9})
    engine = DiffusionEngine(pipe, DiffusionOptions(batching="request"), max_batch=8)
    assert engine.request_batcher.edit_pipe.transformer is pipe.transformer  # the same weights
    for stage_request in [batch[0], stronger, batch[1]]:
        engine.add_request(stage_request)
    first_call = engine.step()  # the two edits of equal strength, in one img2img call
    # strength 0.6 of 4 steps skips int(4 - 2.4) = 1 and runs 3
    assert {o.request_id for o in first_call if o.finished} == {"e0", "e1"}
    assert [o.params["total_steps"] for o in first_call if o.request_id == "e0" and not o.finished] == [3, 3, 3]
    rest = drive(engine, {})
    for index, (prompt, image) in enumerate(inputs):
        got = image_of([o for o in first_call if o.request_id == f"e{index}"])
        np.testing.assert_allclose(
            got, reference_edit(img2img, prompt, image, {**shared, "seed": 10 + index}), atol=ATOL
        )
    np.testing.assert_allclose(
        image_of(rest["strong"]),
        reference_edit(img2img, "a cup of coffee", picture(32, 32), {**shared, "strength": 0.9, "seed": 20}),
        atol=ATOL,
    )


def test_the_input_image_and_strength_shape_the_result(pipe):
    engine = DiffusionEngine(pipe, DiffusionOptions(), max_batch=8)
    params = dict(height=32, width=32, num_inference_steps=4, guidance_scale=4.0, seed=5)
    outputs = drive(
        engine,
        {
            0: [
                edit("a", "a tree", picture(32, 32), strength=0.5, **params),
                edit("b", "a tree", picture(32, 32, phase=3.0), strength=0.5, **params),
                edit("full", "a tree", picture(32, 32), strength=1.0, **params),
                request("text", "a tree", **params),
            ]
        },
    )
    a, b, full = (image_of(outputs[key]) for key in ("a", "b", "full"))
    assert np.abs(a - b).max() > 1e-2  # same seed and prompt, another picture
    assert np.abs(a - full).max() > 1e-2
    assert final(outputs["text"]).error is None  # an edit and a text-to-image request share the batch


def test_an_edit_without_size_keeps_its_image_size(pipe):
    engine = DiffusionEngine(pipe, DiffusionOptions(), max_batch=4)
    params = dict(num_inference_steps=2, guidance_scale=4.0, seed=1)
    outputs = drive(engine, {0: [edit("a", "a tree", picture(70, 35), **params)]})
    output = final(outputs["a"])
    assert payload_array(output.payloads["image"]).shape == (32, 64, 3)  # rounded down to multiples of 16
    assert output.params["strength"] == 0.6  # diffusers' default


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"strength": 0}, "strength"),
        ({"strength": 1.5}, "strength"),
        ({"strength": -0.1}, "strength"),
        ({"strength": float("nan")}, "strength"),
        ({"strength": "half"}, "strength"),
        ({"image": b"not an image"}, "image"),
        ({"image": None, "strength": 0.5}, "strength"),  # a strength without an image
        ({"image": "big", "height": None}, "image"),  # larger than the deployment renders
    ],
)
def test_bad_edit_parameters_fail_that_request_only(pipe, change, field):
    engine = DiffusionEngine(pipe, DiffusionOptions(max_height=64, max_width=64), max_batch=4)
    params = dict(height=32, width=32, num_inference_steps=2, guidance_scale=4.0)
    engine.add_request(edit("good", "a tree", picture(32, 32), seed=1, **params))
    engine.step()
    change = dict(change)
    image = change.pop("image", "small")
    knobs = {**params, **change}
    if image == "big":
        knobs.pop("width")
    with pytest.raises(InvalidRequest) as raised:  # a bad type or range fails as the knobs are converted
        bad = request("bad", "a tree", **knobs)
        if image == "small":
            bad.payloads = {"image": bytes_payload(png_of(picture(32, 32)))}
        elif image == "big":
            bad.payloads = {"image": bytes_payload(png_of(picture(96, 32)))}
        elif image is not None:
            bad.payloads = {"image": bytes_payload(image)}
        engine.add_request(bad)
    assert raised.value.param == field
    outputs = drive(engine, {})
    assert final(outputs["good"]).error is None
    assert "bad" not in outputs


def test_an_image_payload_must_be_a_file():
    engine_input = StageRequest(
        request_id="raw", prompt="x", payloads={"image": Tensor(dtype="float32", shape=[2, 2], data=bytes(16))}
    )
    from stages.diffusion.init_image import read_init_image

    with pytest.raises(InvalidRequest) as raised:
        read_init_image(engine_input)
    assert raised.value.param == "image"


@pytest.mark.parametrize("batching", ["step", "request"])
def test_families_without_img2img_refuse_edits_naming_image(tmp_path_factory, batching):
    pixart = load_pipe(tiny_model(tmp_path_factory, "pixart"))
    engine = DiffusionEngine(pixart, DiffusionOptions(batching=batching), max_batch=4)
    assert not engine.supports_edits
    with pytest.raises(InvalidRequest) as raised:
        engine.add_request(edit("e", "a tree", picture(32, 32), height=32, width=32, num_inference_steps=2))
    assert raised.value.param == "image" and "PixArtSigmaPipeline" in str(raised.value)
    assert not engine.has_unfinished()


def test_an_edit_through_the_offline_api(sd3_dir, img2img):
    params = dict(height=32, width=32, num_inference_steps=3, guidance_scale=4.0, seed=9, strength=0.7)
    image = picture(32, 32)
    engine_params = {**params, "output_format": "np"}
    with Omni(sd3_dir) as omni:
        result = omni.generate(
            {"prompt": "a boat", "payloads": {"image": bytes_payload(png_of(image))}, "diffusion": engine_params}
        )[0]
    np.testing.assert_allclose(result.images[0], reference_edit(img2img, "a boat", image, params), atol=ATOL)
