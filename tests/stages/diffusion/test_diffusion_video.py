"""Text-to-video (tiny Wan 2.1) through the diffusion engine: frames equal WanPipeline's own,
MP4 output decodes to the asked frame count and size, bad frame counts fail alone."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from diffusion_helpers import drive, final, load_pipe, request, tiny_model

from stages.diffusion.engine import DiffusionEngine
from stages.diffusion.media import payload_array
from stages.diffusion.options import DiffusionOptions
from stages.errors import InvalidRequest

CLIP = dict(height=32, width=32, num_frames=5, num_inference_steps=2, guidance_scale=5.0)


@pytest.fixture(scope="module")
def pipe(tmp_path_factory):
    return load_pipe(tiny_model(tmp_path_factory, "wan"))


@pytest.mark.parametrize("batching", ["step", "request"])
def test_video_engine_matches_the_pipeline(pipe, batching):
    engine = DiffusionEngine(pipe, DiffusionOptions(batching=batching), max_batch=4)
    assert engine.mode == batching and engine.traits.is_video
    jobs = [("a cat walking", CLIP), ("waves on a beach", CLIP), ("a red car", {**CLIP, "num_frames": 9})]
    first = [request("v0", jobs[0][0], seed=0, **jobs[0][1])]
    later = [request(f"v{i}", prompt, seed=i, **params) for i, (prompt, params) in enumerate(jobs) if i]
    # step batching: the later requests join mid-denoise; request batching: v0 and v1 share a call
    outputs = drive(engine, {0: first, 1: later} if batching == "step" else {0: first + later})
    for index, (prompt, params) in enumerate(jobs):
        output = final(outputs[f"v{index}"])
        assert output.modality == "video" and output.error is None
        frames = payload_array(output.payloads["video"])
        expected = pipe(
            prompt,
            negative_prompt="",
            generator=torch.Generator("cpu").manual_seed(index),
            output_type="np",
            **params,
        ).frames[0]
        assert frames.shape == (params["num_frames"], 32, 32, 3)
        np.testing.assert_allclose(frames, expected, atol=1e-4)
        progress = [o for o in outputs[f"v{index}"] if not o.finished]
        assert [o.params["step"] for o in progress] == [1, 2]


def test_mp4_output(pipe):
    import av

    engine = DiffusionEngine(pipe, DiffusionOptions(), max_batch=4)
    outputs = drive(engine, {0: [request("mp4", "a cat walking", seed=1, **{**CLIP, "output_format": "mp4"})]})
    output = final(outputs["mp4"])
    assert output.params["mime_type"] == "video/mp4" and output.params["num_frames"] == 5
    with av.open(io.BytesIO(output.payloads["video"].data)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264"
        frames = list(container.decode(stream))
    assert len(frames) == 5 and (frames[0].width, frames[0].height) == (32, 32)


@pytest.mark.parametrize(("params", "field"), [({"num_frames": 6}, "num_frames"), ({"height": 24}, "height")])
def test_bad_video_parameters(pipe, params, field):
    engine = DiffusionEngine(pipe, DiffusionOptions(max_frames=9), max_batch=4)
    with pytest.raises(InvalidRequest) as raised:
        engine.add_request(request("bad", "a cat", **{**CLIP, **params}))
    assert raised.value.param == field
    with pytest.raises(InvalidRequest) as raised:
        engine.add_request(request("long", "a cat", **{**CLIP, "num_frames": 13}))
    assert raised.value.param == "num_frames"
