"""The diffusion knobs, converted and checked once at the edge: good values typed, each bad value
naming its field, carried to every stage on the request's options."""

from __future__ import annotations

import math

import pytest

from stages.diffusion_knobs import DiffusionKnobs, diffusion_knobs
from stages.errors import InvalidRequest
from stages.orchestrator.forwarding import build_stage_request
from stages.protocol import RequestOptions, StageOutput, StageRequest, decoder, encode

GOOD = {
    "width": 64,
    "height": 32,
    "num_inference_steps": 4,
    "guidance_scale": 3.5,
    "negative_prompt": "blurry",
    "seed": 2**63 - 1,
    "strength": 1.0,
    "num_frames": 9,
    "output_format": "webp",
    "fps": 24,
}


def test_good_values_are_typed_as_sent():
    knobs = diffusion_knobs(GOOD)
    assert knobs == DiffusionKnobs(**GOOD)
    assert knobs.fields() == GOOD


def test_a_seed_is_any_signed_64_bit_integer():
    assert diffusion_knobs({"seed": -1}).seed == -1 and diffusion_knobs({"seed": -(2**63)}).seed == -(2**63)


def test_lax_spellings_convert_once():
    knobs = diffusion_knobs({"num_inference_steps": 4.0, "seed": "7", "output_format": "JPG", "guidance_scale": 2})
    assert (knobs.num_inference_steps, knobs.seed, knobs.output_format) == (4, 7, "jpeg")
    assert isinstance(knobs.guidance_scale, float)


def test_each_layer_wins_over_the_one_before_and_none_is_not_set():
    knobs = diffusion_knobs({"seed": 1, "width": 32}, None, {"seed": 2, "width": None})
    assert (knobs.seed, knobs.width) == (2, 32)
    assert diffusion_knobs().fields() == {}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("width", 0),
        ("height", -16),
        ("height", "tall"),
        ("num_inference_steps", 0),
        ("num_inference_steps", 2.5),
        ("num_inference_steps", True),
        ("guidance_scale", -1),
        ("guidance_scale", math.inf),
        ("guidance_scale", "strong"),
        ("negative_prompt", 3),
        ("seed", -(2**63) - 1),
        ("seed", 2**63),
        ("seed", "x"),
        ("strength", 0),
        ("strength", 1.5),
        ("strength", math.nan),
        ("num_frames", 0),
        ("output_format", "gif"),
        ("output_format", 5),
        ("fps", 0),
    ],
)
def test_each_bad_value_names_its_field(name, value):
    with pytest.raises(InvalidRequest) as raised:
        diffusion_knobs({**GOOD, name: value})
    assert raised.value.param == name and raised.value.reason
    with pytest.raises(InvalidRequest) as raised:
        diffusion_knobs({name: value}, param="sampling_params_list[1]")
    assert raised.value.param == f"sampling_params_list[1].{name}"


def test_an_unknown_knob_or_a_layer_that_is_no_object_is_named():
    with pytest.raises(InvalidRequest) as raised:
        diffusion_knobs({"num_inference_step": 4}, param="sampling_params_list[0]")
    assert raised.value.param == "sampling_params_list[0].num_inference_step"
    with pytest.raises(InvalidRequest) as raised:
        diffusion_knobs("fast", param="sampling_params_list[0]")
    assert raised.value.param == "sampling_params_list[0]"


def test_the_knobs_travel_on_the_options_to_every_stage():
    knobs = diffusion_knobs({"seed": 5, "num_inference_steps": 2})
    request = StageRequest(request_id="r", prompt="a cat", options=RequestOptions(diffusion=knobs))
    decoded = decoder(StageRequest).decode(encode(request))
    assert decoded.options.diffusion == knobs and decoded.params == {}
    forwarded = build_stage_request(
        wire_id="r", source_stage=0, target_stage=1, seq=0, finished=True,
        outputs=[StageOutput(request_id="r", text="a cat", finished=True)], sampling=None,
        base_params=decoded.params, options=decoded.options, at=0.0,
    )  # fmt: skip
    assert forwarded.options.diffusion == knobs
    assert "seed" not in forwarded.params and "num_inference_steps" not in forwarded.params
