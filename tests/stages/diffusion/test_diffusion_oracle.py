"""Oracle: the engine's images equal diffusers' own pipeline `__call__` for the same seeds.

Step batching: three requests with different sizes, step counts and guidance join the
running batch at different steps. Request batching: compatible requests share one call.
Both for SD3 and PixArt-Sigma.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from diffusion_helpers import drive, final, load_pipe, request, tiny_model

from stages.diffusion.engine import DiffusionEngine
from stages.diffusion.media import payload_array
from stages.diffusion.options import DiffusionOptions

FAMILIES = ["sd3", "pixart"]
ATOL = 1e-4


@pytest.fixture(scope="module", params=FAMILIES)
def pipe(request, tmp_path_factory):
    return load_pipe(tiny_model(tmp_path_factory, request.param))


def reference(pipe, prompt: str, params: dict) -> np.ndarray:
    """diffusers' own answer for one request."""
    extra = {"use_resolution_binning": False, "clean_caption": False} if "PixArt" in type(pipe).__name__ else {}
    return pipe(
        prompt,
        negative_prompt=params.get("negative_prompt", ""),
        height=params["height"],
        width=params["width"],
        num_inference_steps=params["num_inference_steps"],
        guidance_scale=params["guidance_scale"],
        generator=torch.Generator("cpu").manual_seed(params["seed"]),
        output_type="np",
        **extra,
    ).images[0]


def image_of(outputs) -> np.ndarray:
    output = final(outputs)
    assert output.error is None, output.error
    return payload_array(output.payloads["image"])


CONCURRENT = [
    ("a cat sitting on a red chair", dict(height=64, width=64, num_inference_steps=5, guidance_scale=4.5, seed=1)),
    (
        "a lighthouse at dusk",
        dict(height=32, width=48, num_inference_steps=3, guidance_scale=7.0, seed=2, negative_prompt="blurry"),
    ),
    ("a dog running on the beach", dict(height=64, width=64, num_inference_steps=4, guidance_scale=1.0, seed=3)),
]


def test_step_batching_matches_pipeline_with_requests_joining_mid_denoise(pipe):
    engine = DiffusionEngine(pipe, DiffusionOptions(batching="step"), max_batch=8)
    arrivals = {
        step: [request(f"r{step}", prompt, **params)]
        for step, (prompt, params) in zip([0, 1, 3], CONCURRENT, strict=True)
    }
    outputs = drive(engine, arrivals)
    for step, (prompt, params) in zip([0, 1, 3], CONCURRENT, strict=True):
        got = image_of(outputs[f"r{step}"])
        assert got.shape == (params["height"], params["width"], 3)
        np.testing.assert_allclose(got, reference(pipe, prompt, params), atol=ATOL)
    # the 64x64 requests r0 and r3 shared transformer forwards while both ran
    assert engine.step_batcher.forwards < sum(p["num_inference_steps"] for _, p in CONCURRENT)


def test_step_batching_without_cfg_batching_matches_pipeline(pipe):
    engine = DiffusionEngine(pipe, DiffusionOptions(batching="step", cfg_batching=False), max_batch=8)
    outputs = drive(engine, {0: [request(f"r{i}", p, **params) for i, (p, params) in enumerate(CONCURRENT)]})
    for index, (prompt, params) in enumerate(CONCURRENT):
        np.testing.assert_allclose(image_of(outputs[f"r{index}"]), reference(pipe, prompt, params), atol=ATOL)


def test_request_batching_matches_pipeline(pipe):
    shared = dict(height=32, width=32, num_inference_steps=3, guidance_scale=5.0)
    prompts = ["a red car", "a field of sunflowers", "an owl at night"]
    batch = [request(f"b{i}", prompt, seed=10 + i, **shared) for i, prompt in enumerate(prompts)]
    other = request("other", "a cup of coffee", seed=20, **{**shared, "num_inference_steps": 2})
    engine = DiffusionEngine(pipe, DiffusionOptions(batching="request"), max_batch=8)
    for stage_request in [*batch[:2], other, batch[2]]:
        engine.add_request(stage_request)
    first_call = engine.step()  # the three compatible requests, in one pipeline call
    assert {o.request_id for o in first_call if o.finished} == {"b0", "b1", "b2"}
    outputs = drive(engine, {})
    outputs_by_id = {rid: [o for o in first_call if o.request_id == rid] for rid in ("b0", "b1", "b2")}
    for index, prompt in enumerate(prompts):
        np.testing.assert_allclose(
            image_of(outputs_by_id[f"b{index}"]), reference(pipe, prompt, {**shared, "seed": 10 + index}), atol=ATOL
        )
    np.testing.assert_allclose(
        image_of(outputs["other"]),
        reference(pipe, "a cup of coffee", {**shared, "num_inference_steps": 2, "seed": 20}),
        atol=ATOL,
    )


def test_one_call_at_a_time_matches_pipeline(pipe):
    engine = DiffusionEngine(pipe, DiffusionOptions(batching="none"), max_batch=8)
    prompt, params = CONCURRENT[1]
    outputs = drive(engine, {0: [request("solo", prompt, **params), request("solo2", prompt, **params)]})
    np.testing.assert_allclose(image_of(outputs["solo"]), reference(pipe, prompt, params), atol=ATOL)
    np.testing.assert_allclose(image_of(outputs["solo2"]), image_of(outputs["solo"]), atol=0)
