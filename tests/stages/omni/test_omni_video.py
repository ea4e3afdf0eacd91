"""Video parts reach both Qwen-Omni thinkers without torchvision.

The clips are synthetic (tests/video_samples.py: 56x56, 10 fps, a shifting colour and a moving bar).
Sampling, resizing and patchifying are ours (PyAV, the PIL image processor and
stages/models/omni_video_processor.py); the patch layout is checked against transformers' own
`Qwen2VLVideoProcessor.patchify`, and everything after preprocessing against transformers'
models: given the same `pixel_values_videos` / `video_grid_thw` / `video_second_per_grid`, the
thinkers' greedy tokens equal `thinker.generate`, and for Qwen3-Omni the whole pipeline's tokens,
codes and waveform equal `generate(return_audio=True)` (Qwen2.5-Omni's cannot take video in
transformers 5.19: it forwards `pixel_values_videos` to the talker's generate, which rejects them).
"""

from __future__ import annotations

import ast
import base64
import io
from pathlib import Path

import numpy as np
import pytest
from conftest import hf_generate, run_chain
from video_samples import empty_video_bytes, video_b64, video_bytes, video_data_url

from stages.config import StageDeployConfig
from stages.errors import ConfigError, InvalidRequest
from stages.protocol import RequestOptions, SamplingParams, StageRequest

FAMILIES = ["qwen2_5_omni", "qwen3_omni"]
VIDEO_TOKEN = 151656  # <|VIDEO|> in Qwen2.5-Omni, <|video_pad|> in Qwen3-Omni
N_TEXT, N_CODES = 6, 8


def video_request(*videos: dict, extra: dict | None = None, max_tokens: int = N_TEXT) -> StageRequest:
    content = [*videos, {"type": "text", "text": "What happens in this video?"}]
    return StageRequest(
        request_id="video",
        messages=[{"role": "user", "content": content}],
        sampling=SamplingParams(temperature=0, max_tokens=max_tokens, stop_token_ids=[151645]),
        options=RequestOptions(extra=extra or {}),
    )


def video_part(seed: int = 0, **clip) -> dict:
    return {"type": "video", "video": video_b64(seed, **clip)}


def family_processor(family: str, model_dir):
    from stages.models import qwen2_5_omni, qwen3_omni

    return {"qwen2_5_omni": qwen2_5_omni, "qwen3_omni": qwen3_omni}[family].processor(str(model_dir))


def prepare(family: str, model_dir, request: StageRequest, options: dict | None = None) -> StageRequest:
    from stages.models import get_family

    return get_family(family).prepare_request(request, model_dir, StageDeployConfig(options=options or {}))


def thinker_tokens(engine, request: StageRequest) -> list[int]:
    engine.add_request(request)
    tokens = []
    while engine.has_unfinished():
        for output in engine.step():
            tokens += output.token_ids
    return tokens


def hf_inputs(prepared: StageRequest) -> dict:
    import torch

    from stages.tensors import from_wire

    ids = torch.tensor([prepared.prompt_token_ids])
    payloads = {key: from_wire(value, "cpu") for key, value in prepared.payloads.items()}
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), **payloads}


def hf_thinker_tokens(family: str, model_dir, prepared: StageRequest, n_text: int) -> list[int]:
    """transformers' `thinker.generate`, greedy, on our processed inputs."""
    import torch
    from transformers import Qwen2_5OmniForConditionalGeneration, Qwen3OmniMoeForConditionalGeneration

    model_class = (
        Qwen2_5OmniForConditionalGeneration if family == "qwen2_5_omni" else Qwen3OmniMoeForConditionalGeneration
    )
    thinker = model_class.from_pretrained(model_dir).thinker.eval()
    inputs = hf_inputs(prepared)
    with torch.no_grad():
        out = thinker.generate(**inputs, max_new_tokens=n_text, do_sample=False, eos_token_id=[151645])
    return out[0, inputs["input_ids"].shape[1] :].tolist()


@pytest.fixture(scope="module")
def thinkers(omni_models) -> dict:
    from stages.models import load_stage_engine

    return {
        family: load_stage_engine(family, "thinker", omni_models[family], StageDeployConfig()) for family in FAMILIES
    }


@pytest.fixture(scope="module")
def hf_video_tokens(omni_models) -> dict:
    """transformers' thinker tokens for `video_request(video_part(0))`, per family."""
    request = video_request(video_part(0))
    return {
        family: hf_thinker_tokens(family, omni_models[family], prepare(family, omni_models[family], request), N_TEXT)
        for family in FAMILIES
    }


# -- preprocessing -----------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_video_placeholders_expand_to_the_grid(omni_models, family):
    """Two clips: 2 s at 10 fps (4 frames sampled at 2 fps) and 4 s at 1 fps (all 4 frames, 1 fps), as
    a `video` part and as a `video_url` data URL. Frames are 56x56, on a 4x4 patch grid after resizing."""
    slow = {"type": "video_url", "video_url": {"url": video_data_url(1, seconds=4.0, rate=1)}}
    prepared = prepare(family, omni_models[family], video_request(video_part(0), slow))
    grids = prepared.payloads["video_grid_thw"]
    from stages.tensors import to_numpy

    assert to_numpy(grids).tolist() == [[2, 4, 4], [2, 4, 4]]
    assert to_numpy(prepared.payloads["video_second_per_grid"]).tolist() == [1.0, 2.0]
    assert to_numpy(prepared.payloads["pixel_values_videos"]).shape[0] == 2 * 32
    ids = prepared.prompt_token_ids
    assert ids.count(VIDEO_TOKEN) == 2 * 32 // 4  # t x h x w / merge^2 per clip
    first = ids.index(VIDEO_TOKEN)
    assert ids[first : first + 8] == [VIDEO_TOKEN] * 8 and ids[first + 8] != VIDEO_TOKEN  # one run per clip


@pytest.mark.parametrize(("fmt", "codec"), [("mp4", "libx264"), ("webm", "libvpx"), ("matroska", "mpeg4")])
def test_containers_decode_to_the_same_samples(fmt, codec):
    from stages.models.omni_video_decode import decode_video
    from stages.models.omni_video_limits import VideoLimits

    clip = video_bytes(0, fmt=fmt, codec=codec)
    video = decode_video(clip, "video", VideoLimits(min_pixels=28 * 28, max_pixels=56 * 56), factor=28, temporal=2)
    assert (len(video.frames), video.frames[0].size, video.fps) == (4, (56, 56), 2.0)


def _transformers_video_patchify():
    """`Qwen2VLVideoProcessor.patchify` compiled from transformers' source on its own (its module
    imports torchvision at the top)."""
    import torch
    from transformers.models import qwen2_vl

    path = Path(qwen2_vl.__file__).parent / "video_processing_qwen2_vl.py"
    tree = ast.parse(path.read_text())
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Qwen2VLVideoProcessor")
    method = next(node for node in cls.body if isinstance(node, ast.FunctionDef) and node.name == "patchify")
    namespace = {"torch": torch}
    exec(compile(ast.Module([method], type_ignores=[]), str(path), "exec"), namespace)
    return namespace["patchify"]


@pytest.mark.parametrize("family", FAMILIES)
def test_frames_patchify_like_transformers_video_processor(omni_models, family):
    """Five frames (an odd count: the last is repeated) of 2x3 merged patches, normalised as the image
    processor normalises images."""
    import torch
    from PIL import Image

    video_processor = family_processor(family, omni_models[family]).video_processor
    images, factor = video_processor.image_processor, video_processor.factor
    pixels = np.random.default_rng(0).integers(0, 255, size=(5, 2 * factor, 3 * factor, 3), dtype=np.uint8)
    patches, grid = video_processor.patchify([Image.fromarray(frame) for frame in pixels])

    frames = np.concatenate([pixels, pixels[-1:]]).transpose(0, 3, 1, 2).astype(np.float32)
    normalised = np.stack(
        [images.normalize(images.rescale(frame, 1 / 255), images.image_mean, images.image_std) for frame in frames]
    )
    theirs, *their_grid = _transformers_video_patchify()(
        None, torch.from_numpy(np.ascontiguousarray(normalised))[None], video_processor.patch_size, 2, 2
    )
    assert grid == their_grid == [3, 4, 6]
    np.testing.assert_allclose(patches, theirs[0].numpy(), atol=1e-6)


def test_frame_sampling_follows_qwen():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    from stages.models.omni_video_decode import VideoFacts, frame_size, sample_count, sample_indices
    from stages.models.omni_video_limits import VideoLimits

    limits = VideoLimits()
    ten_seconds = VideoFacts(frames=300, frame_rate=30.0, width=1920, height=1080)
    assert sample_count(ten_seconds, limits, 2) == 20  # 2 fps
    assert sample_count(ten_seconds, VideoLimits(max_frames=9), 2) == 8  # capped, even
    assert sample_count(VideoFacts(frames=20, frame_rate=10.0, width=56, height=56), limits, 2) == 4  # min_frames
    assert sample_count(VideoFacts(frames=3, frame_rate=10.0, width=56, height=56), limits, 2) == 2
    assert sample_count(VideoFacts(frames=1, frame_rate=10.0, width=56, height=56), limits, 2) == 1
    assert sample_indices(300, 20) == np.linspace(0, 299, 20).round().astype(int).tolist()
    assert sample_indices(300, 20)[0] == 0 and sample_indices(300, 20)[-1] == 299

    assert frame_size(ten_seconds, limits, 20, factor=28, temporal=2) == smart_resize(
        1080, 1920, factor=28, min_pixels=limits.min_pixels, max_pixels=limits.max_pixels
    )
    height, width = frame_size(ten_seconds, limits, 768, factor=28, temporal=2)  # the clip budget binds
    assert height % 28 == 0 and width % 28 == 0
    assert limits.min_pixels <= height * width <= limits.max_total_pixels * 2 / 768
    tight = VideoLimits(max_total_pixels=1000)
    floor = int(1.05 * tight.min_pixels)  # the per-frame cap never drops below this
    assert frame_size(ten_seconds, tight, 20, factor=28, temporal=2) == smart_resize(
        1080, 1920, factor=28, min_pixels=tight.min_pixels, max_pixels=floor
    )


def test_video_limits_come_from_the_checkpoint(omni_models):
    from transformers import Qwen2_5OmniProcessor, Qwen3OmniMoeProcessor

    from stages.models.omni_video_limits import checkpoint_limits

    tiny = family_processor("qwen2_5_omni", omni_models["qwen2_5_omni"]).video_processor.limits
    assert (tiny.min_pixels, tiny.max_pixels, tiny.fps, tiny.max_frames) == (28 * 28 * 4, 28 * 28 * 64, 2.0, 768)
    assert checkpoint_limits({}, Qwen2_5OmniProcessor, 28).max_pixels == 768 * 28 * 28  # the processor's default
    assert checkpoint_limits({}, Qwen3OmniMoeProcessor, 32).min_pixels == 128 * 32 * 32
    own = checkpoint_limits({"fps": 1, "max_frames": 16, "size": {"longest_edge": 200000}}, Qwen3OmniMoeProcessor, 32)
    assert (own.fps, own.max_frames, own.max_pixels) == (1.0, 16, 200000)


# -- the thinker sees the video ----------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_thinker_output_depends_on_the_video(thinkers, family):
    engine = thinkers[family]
    first = thinker_tokens(engine, video_request(video_part(0), max_tokens=8))
    assert thinker_tokens(engine, video_request(video_part(0), max_tokens=8)) == first
    assert thinker_tokens(engine, video_request(video_part(1), max_tokens=8)) != first
    assert thinker_tokens(engine, video_request(video_part(0, seconds=3.0), max_tokens=8)) != first


@pytest.mark.parametrize("family", FAMILIES)
def test_thinker_video_prompt_equals_transformers(thinkers, hf_video_tokens, family):
    assert thinker_tokens(thinkers[family], video_request(video_part(0))) == hf_video_tokens[family]


def test_qwen3_video_pipeline_equals_transformers(omni_models):
    """Thinker (video merge, M-RoPE with the clip's seconds per grid, deepstack), talker (its own
    M-RoPE over the video grid) and code2wav, against `generate(return_audio=True)`."""
    model = omni_models["qwen3_omni"]
    request = video_request(video_part(2, seconds=3.0))
    reference = hf_generate("qwen3_omni", model, hf_inputs(prepare("qwen3_omni", model, request)), N_TEXT, N_CODES)
    [result] = run_chain("qwen3_omni", model, [request], SamplingParams(temperature=0, max_tokens=N_CODES)).values()
    assert result["tokens"] == reference["tokens"]
    assert result["codes"] == reference["codes"] and len(result["codes"]) > 0
    scale = float(np.abs(reference["wav"]).max()) or 1.0
    assert np.allclose(result["audio"], reference["wav"], rtol=1e-4, atol=1e-5 * scale)


@pytest.mark.parametrize("codec_prompt", [None, "qwen"])
def test_qwen2_5_video_stage_chain_speaks(omni_models, hf_video_tokens, codec_prompt):
    """The thinker's tokens equal transformers'; the talker (plain positions, or with
    `talker_codec_prompt: qwen` M-RoPE over the video grid) and token2wav turn them into audio."""
    deploy = {"options": {"talker_codec_prompt": codec_prompt}} if codec_prompt else None
    talker = SamplingParams(temperature=0, max_tokens=N_CODES)
    request = video_request(video_part(0))
    [result] = run_chain("qwen2_5_omni", omni_models["qwen2_5_omni"], [request], talker, deploy).values()
    assert result["errors"] == []
    assert result["tokens"] == hf_video_tokens["qwen2_5_omni"]
    assert len(result["codes"]) > 0 and result["audio"].size > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_offline_api_answers_a_video(omni_models, hf_video_tokens, family):
    from stages.omni import Omni

    request = video_request(video_part(0))
    with Omni(omni_models[family]) as omni:
        [result] = omni.generate(
            request.messages,
            {"temperature": 0, "max_tokens": N_TEXT, "stop_token_ids": [151645]},
            stage_sampling={"talker": {"temperature": 0, "max_tokens": N_CODES}},
        )
    assert result.token_ids == hf_video_tokens[family]
    assert result.sample_rate == 24000 and result.audio.size > 0


# -- bad input ---------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _wav() -> bytes:
    import soundfile

    buffer = io.BytesIO()
    soundfile.write(buffer, np.zeros(1600, dtype=np.float32), 16000, format="WAV")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("part", "field", "words"),
    [
        ({"type": "video", "video": _b64(b"not a video at all")}, "messages[0].content[0].video", "could not decode"),
        ({"type": "video", "video": "%%%"}, "messages[0].content[0].video", "base64"),
        ({"type": "video", "video": 7}, "messages[0].content[0].video", "expected base64"),
        (
            {"type": "video_url", "video_url": {"url": "data:video/mp4;base64," + _b64(b"\x00" * 64)}},
            "messages[0].content[0].video_url.url",
            "could not decode",
        ),
        ({"type": "video", "video": _b64(empty_video_bytes())}, "messages[0].content[0].video", "no frames"),
        ({"type": "video", "video": _b64(_wav())}, "messages[0].content[0].video", "no video stream"),
    ],
)
def test_bad_video_names_the_field(omni_models, part, field, words):
    with pytest.raises(InvalidRequest) as raised:
        prepare("qwen2_5_omni", omni_models["qwen2_5_omni"], video_request(part))
    assert raised.value.param == field and words in raised.value.message


def test_audio_in_video_is_refused(omni_models):
    with pytest.raises(InvalidRequest) as raised:
        prepare(
            "qwen3_omni", omni_models["qwen3_omni"], video_request(video_part(0), extra={"use_audio_in_video": True})
        )
    assert raised.value.param == "use_audio_in_video"


@pytest.fixture
def thinker_with_video_options(omni_models):
    """Builds the Qwen2.5 thinker with `options["video"]`."""
    from stages.models import load_stage_engine

    model = omni_models["qwen2_5_omni"]
    return lambda video: load_stage_engine(
        "qwen2_5_omni", "thinker", model, StageDeployConfig(options={"video": video})
    )


@pytest.mark.parametrize(
    ("options", "words"),
    [({"max_seconds": 1.5}, "2.0 s long; at most 1.5 s"), ({"max_source_pixels": 3000}, "56x56; at most 3000")],
)
def test_videos_beyond_the_deployed_limits_are_refused(thinker_with_video_options, options, words):
    engine = thinker_with_video_options(options)
    engine.add_request(video_request(video_part(0)))  # prepared off the step loop: refused by a step
    outputs = []
    while not outputs:
        outputs = engine.step()
    [refused] = outputs
    assert refused.finish_reason == "error" and refused.error.type == "invalid_request_error"
    assert refused.error.param == "messages[0].content[0].video" and words in refused.error.message
    assert not engine.has_unfinished()


def test_deployed_limits_set_the_sampling(omni_models):
    video = {"min_frames": 2, "max_frames": 2, "min_pixels": 28 * 28, "max_pixels": 28 * 28}
    prepared = prepare("qwen2_5_omni", omni_models["qwen2_5_omni"], video_request(video_part(0)), {"video": video})
    from stages.tensors import to_numpy

    assert to_numpy(prepared.payloads["video_grid_thw"]).tolist() == [[1, 2, 2]]
    assert prepared.prompt_token_ids.count(VIDEO_TOKEN) == 1


@pytest.mark.parametrize(
    ("video", "field"),
    [
        ({"max_frames": 0}, "options.video.max_frames"),
        ({"frames": 4}, "options.video.frames"),
        ({"min_frames": 8, "max_frames": 4}, "options.video"),
        ("all of it", "options.video"),
    ],
)
def test_bad_video_options_fail_the_build(thinker_with_video_options, video, field):
    with pytest.raises(ConfigError) as raised:
        thinker_with_video_options(video)
    assert raised.value.field == field
