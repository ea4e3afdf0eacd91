"""Request lifecycle in the diffusion engine: cancellation, progress, validation, formats,
accelerations, chunked prompts, options."""

from __future__ import annotations

import io

import numpy as np
import pytest
from diffusion_helpers import drive, final, load_pipe, options, request, tiny_model
from PIL import Image

from stages.config import StageDeployConfig
from stages.diffusion.engine import DiffusionEngine
from stages.diffusion.media import payload_array
from stages.diffusion.options import DiffusionOptions, read_options
from stages.errors import ConfigError, InvalidRequest
from stages.protocol import StageRequest

SMALL = dict(height=32, width=32, num_inference_steps=4, guidance_scale=4.0)


@pytest.fixture(scope="module")
def sd3_dir(tmp_path_factory):
    return tiny_model(tmp_path_factory, "sd3")


@pytest.fixture(scope="module")
def pipe(sd3_dir):
    return load_pipe(sd3_dir)


def test_cancel_mid_denoise_frees_the_slot(pipe):
    engine = DiffusionEngine(pipe, DiffusionOptions(), max_batch=1)
    engine.add_request(request("long", "a castle", seed=1, **{**SMALL, "num_inference_steps": 50}))
    engine.add_request(request("next", "a boat", seed=2, **SMALL))
    engine.step()
    engine.step()
    assert [r.request_id for r in engine.step_batcher.running] == ["long"]
    engine.abort("long")
    assert engine.num_running == 0
    outputs = drive(engine, {})
    assert "long" not in outputs
    assert final(outputs["next"]).finish_reason == "stop"
    assert not engine.has_unfinished()
    engine.abort("long")  # unknown ids are ignored


def test_cancel_before_admission(pipe):
    engine = DiffusionEngine(pipe, DiffusionOptions(), max_batch=1)
    engine.add_request(request("queued", "a boat", seed=2, **SMALL))
    engine.abort("queued")
    assert not engine.has_unfinished()
    assert engine.step() == []


@pytest.mark.parametrize("batching", ["step", "request"])
def test_progress_events_count_every_step(pipe, batching):
    engine = DiffusionEngine(pipe, DiffusionOptions(batching=batching), max_batch=4)
    outputs = drive(engine, {0: [request("a", "a tree", seed=1, **SMALL)]})["a"]
    progress = [o for o in outputs if not o.finished]
    assert [o.params["step"] for o in progress] == [1, 2, 3, 4]
    assert [o.params["progress"] for o in progress] == [0.25, 0.5, 0.75, 1.0]
    assert all(o.modality == "image" and not o.payloads for o in progress)
    assert [o.seq for o in outputs] == list(range(len(outputs)))
    assert final(outputs).params["progress"] == 1.0


def test_progress_events_can_be_switched_off(pipe):
    engine = DiffusionEngine(pipe, DiffusionOptions(progress_events=False), max_batch=4)
    outputs = drive(engine, {0: [request("a", "a tree", seed=1, **SMALL)]})["a"]
    assert len(outputs) == 1 and outputs[0].finished


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"height": 40}, "height"),  # not a multiple of 16 (VAE 8 x patch 2)
        ({"width": 2048}, "width"),  # above the deployment's limit
        ({"height": 0}, "height"),
        ({"num_inference_steps": 0}, "num_inference_steps"),
        ({"num_inference_steps": 1000}, "num_inference_steps"),
        ({"num_inference_steps": 2.5}, "num_inference_steps"),
        ({"guidance_scale": -1}, "guidance_scale"),
        ({"output_format": "gif"}, "output_format"),
        ({"seed": "x"}, "seed"),
        ({"num_frames": 9}, "num_frames"),
        ({"negative_prompt": 3}, "negative_prompt"),
    ],
)
def test_bad_parameters_fail_that_request_only(pipe, params, field):
    engine = DiffusionEngine(pipe, DiffusionOptions(max_width=512), max_batch=4)
    engine.add_request(request("good", "a tree", seed=1, **SMALL))
    engine.step()
    with pytest.raises(InvalidRequest) as raised:
        engine.add_request(request("bad", "a tree", **{**SMALL, **params}))
    assert raised.value.param == field
    assert field in str(raised.value)
    outputs = drive(engine, {})
    assert final(outputs["good"]).error is None
    assert "bad" not in outputs


def test_missing_prompt_and_duplicate_id_are_rejected(pipe):
    engine = DiffusionEngine(pipe, DiffusionOptions(), max_batch=4)
    with pytest.raises(InvalidRequest, match="prompt"):
        engine.add_request(StageRequest(request_id="empty", prompt="  ", options=options(**SMALL)))
    engine.add_request(request("dup", "a tree", **SMALL))
    with pytest.raises(InvalidRequest) as raised:
        engine.add_request(request("dup", "a tree", **SMALL))
    assert raised.value.param == "request_id"


def test_a_failing_forward_fails_its_bucket_only(pipe):
    """A request whose conditioning is broken fails with a server error; another bucket finishes."""
    engine = DiffusionEngine(pipe, DiffusionOptions(), max_batch=4)
    engine.add_request(request("ok", "a tree", seed=1, **{**SMALL, "height": 64}))
    engine.add_request(request("broken", "a tree", seed=2, **SMALL))
    engine.step()
    broken = next(r for r in engine.step_batcher.running if r.request_id == "broken")
    broken.conditioning = {
        **broken.conditioning,
        "encoder_hidden_states": broken.conditioning["encoder_hidden_states"][:, :, :7],
    }
    outputs = drive(engine, {})
    assert final(outputs["broken"]).error.type == "server_error"
    assert final(outputs["ok"]).error is None


@pytest.mark.parametrize(("fmt", "pil_format"), [("png", "PNG"), ("jpeg", "JPEG"), ("webp", "WEBP")])
def test_encoded_image_formats(pipe, fmt, pil_format):
    engine = DiffusionEngine(pipe, DiffusionOptions(), max_batch=4)
    outputs = drive(engine, {0: [request("a", "a tree", seed=1, **{**SMALL, "width": 48, "output_format": fmt})]})
    output = final(outputs["a"])
    payload = output.payloads["image"]
    assert payload.dtype == "uint8" and payload.shape == [len(payload.data)]
    assert output.params["format"] == fmt and output.params["mime_type"] == f"image/{fmt}"
    image = Image.open(io.BytesIO(payload.data))
    assert image.format == pil_format and image.size == (48, 32)


def test_same_seed_same_image_and_random_seed_reported(pipe):
    engine = DiffusionEngine(pipe, DiffusionOptions(), max_batch=4)
    outputs = drive(engine, {0: [request("a", "a tree", seed=5, **SMALL), request("b", "a tree", seed=5, **SMALL)]})
    np.testing.assert_array_equal(
        payload_array(final(outputs["a"]).payloads["image"]), payload_array(final(outputs["b"]).payloads["image"])
    )
    outputs = drive(engine, {0: [request("c", "a tree", **SMALL)]})
    assert isinstance(final(outputs["c"]).params["seed"], int)


def test_step_cache_skips_transformer_calls_and_stays_close(pipe):
    params = {**SMALL, "num_inference_steps": 20}
    plain = DiffusionEngine(pipe, DiffusionOptions(), max_batch=4)
    cached = DiffusionEngine(pipe, DiffusionOptions(step_cache=0.3), max_batch=4)
    reference = final(drive(plain, {0: [request("a", "a tree", seed=1, **params)]})["a"])
    approx = final(drive(cached, {0: [request("a", "a tree", seed=1, **params)]})["a"])
    assert approx.metrics["transformer_calls"] < reference.metrics["transformer_calls"] == 20
    difference = np.abs(payload_array(approx.payloads["image"]) - payload_array(reference.payloads["image"]))
    assert difference.mean() < 0.05


def test_prompt_arriving_in_chunks(pipe):
    engine = DiffusionEngine(pipe, DiffusionOptions(), max_batch=4)
    first = StageRequest(
        request_id="c", prompt="a red ", finished=False, options=options(**SMALL, seed=3, output_format="np")
    )
    engine.add_request(first)
    assert engine.has_unfinished() and engine.step() == []
    engine.add_chunk(StageRequest(request_id="c", seq=1, prompt="car", finished=True))
    chunked = final(drive(engine, {})["c"])
    whole = final(drive(engine, {0: [request("w", "a red car", seed=3, **SMALL)]})["w"])
    np.testing.assert_array_equal(payload_array(chunked.payloads["image"]), payload_array(whole.payloads["image"]))


def test_options_are_validated():
    with pytest.raises(ConfigError) as raised:
        read_options(StageDeployConfig(options={"batching": "sometimes"}))
    assert raised.value.field == "options.batching"
    with pytest.raises(ConfigError) as raised:
        read_options(StageDeployConfig(options={"step_cach": 0.1}))
    assert raised.value.field.startswith("options")
    with pytest.raises(ConfigError) as raised:
        read_options(StageDeployConfig(device="cpu", options={"cpu_offload": "model"}))
    assert raised.value.field == "options.cpu_offload"
    with pytest.raises(ConfigError) as raised:
        read_options(StageDeployConfig(options={"step_cache": -1}))
    assert raised.value.field == "options.step_cache"
    assert (
        read_options(StageDeployConfig(device="cuda", options={"cpu_offload": "sequential"})).cpu_offload
        == "sequential"
    )


def test_step_cache_needs_step_batching(pipe):
    with pytest.raises(ConfigError) as raised:
        DiffusionEngine(pipe, DiffusionOptions(batching="request", step_cache=0.1))
    assert raised.value.field == "options.step_cache"


def test_from_pretrained_with_deploy_options(sd3_dir):
    engine = DiffusionEngine.from_pretrained(sd3_dir, StageDeployConfig(max_batch=2, options={"default_steps": 2}))
    outputs = drive(engine, {0: [request("a", "a tree", seed=1, height=32, width=32)]})
    assert final(outputs["a"]).params["num_inference_steps"] == 2
