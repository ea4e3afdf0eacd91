"""In-process checks of the pieces under the /v1 routes: remote media fetching (only when
allowed, bounded in size), image decoding limits, audio containers, video parts, signed
artifact tokens, sampling per stage."""

from __future__ import annotations

import base64
import http.server
import io
import struct
import threading
import zlib

import numpy as np
import pytest
import soundfile
from PIL import Image
from video_samples import video_data_url

from control_plane.inference import audio_encoding
from control_plane.inference.errors import ApiError
from control_plane.inference.signing import artifact_id_from_token, artifact_token
from control_plane.openai_compat.chat_inputs import decode_image_bytes, prepare_messages, summarize
from control_plane.openai_compat.sampling import build_sampling
from stages.config import DeployConfig, EdgeConfig, PipelineConfig, StageConfig, StageDeployConfig


def png(width=4, height=3) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), "blue").save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture
def media_server():
    files = {"/cat.png": (png(), "image/png"), "/big.png": (b"\x89PNG" + b"0" * 300_000, "image/png"),
             "/page.html": (b"<html></html>", "text/html")}  # fmt: skip

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body, kind = files.get(self.path, (b"", "text/plain"))
            self.send_response(200 if self.path in files else 404)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def image_message(url: str) -> list[dict]:
    return [
        {
            "role": "user",
            "content": [{"type": "text", "text": "what"}, {"type": "image_url", "image_url": {"url": url}}],
        }
    ]


async def test_remote_media_is_fetched_only_when_allowed_and_bounded(media_server, settings):
    settings.FETCH_MEDIA_URLS = False
    with pytest.raises(ApiError) as refused:
        await prepare_messages(image_message(f"{media_server}/cat.png"))
    assert refused.value.status == 400 and refused.value.code == "url_fetch_disabled"

    settings.FETCH_MEDIA_URLS = True
    settings.MEDIA_URL_HOSTS = ["127.0.0.1"]
    settings.MEDIA_URL_ALLOWED_NETWORKS = ["127.0.0.1/32"]  # a loopback test server: allowed explicitly
    settings.MAX_MEDIA_BYTES = 100_000
    (message,) = await prepare_messages(image_message(f"{media_server}/cat.png"))
    url = message["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,") and base64.b64decode(url.split(",")[1]) == png()
    assert summarize([message])[0]["content"][1]["image_url"]["url"].startswith("<image/png data")

    with pytest.raises(ApiError) as too_big:
        await prepare_messages(image_message(f"{media_server}/big.png"))
    assert too_big.value.status == 413
    with pytest.raises(ApiError) as not_image:
        await prepare_messages(image_message(f"{media_server}/page.html"))
    assert not_image.value.status == 400
    with pytest.raises(ApiError) as missing:
        await prepare_messages(image_message(f"{media_server}/nothing.png"))
    assert missing.value.code == "url_fetch_failed"

    settings.MEDIA_URL_HOSTS = ["media.example.com"]
    with pytest.raises(ApiError) as other_host:
        await prepare_messages(image_message(f"{media_server}/cat.png"))
    assert other_host.value.code == "url_fetch_disabled"


async def test_text_only_parts_flatten_and_audio_parts_are_checked():
    (flat,) = await prepare_messages(
        [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    )
    assert flat["content"] == "ab"
    wav = io.BytesIO()
    soundfile.write(wav, np.zeros(1600, dtype=np.float32), 16000, format="WAV")
    part = {"type": "input_audio", "input_audio": {"data": base64.b64encode(wav.getvalue()).decode(), "format": "wav"}}
    (message,) = await prepare_messages([{"role": "user", "content": [part, {"type": "text", "text": "hear"}]}])
    assert message["content"][0]["type"] == "input_audio"


def video_message(*parts: dict) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": "what happens"}, *parts]}]


async def test_video_parts_pass_on_as_data_urls(settings):
    """Both forms reach the stages unchanged (the thinker's host decodes them); the history keeps no bytes."""
    url = video_data_url(0)
    (message,) = await prepare_messages(
        video_message({"type": "video_url", "video_url": {"url": url}}, {"type": "video", "video": url})
    )
    assert message["content"][1:] == [{"type": "video_url", "video_url": {"url": url}}, {"type": "video", "video": url}]
    summary = summarize([message])[0]["content"]
    assert summary[1]["video_url"]["url"].startswith("<video/mp4 data, ")
    assert summary[2]["video"].startswith("<video/mp4 data, ")


@pytest.mark.parametrize(
    ("part", "status", "param", "code"),
    [
        (
            {"type": "video", "video": "data:image/png;base64,AAAA"},
            400,
            "messages[0].content[1].video",
            "invalid_value",
        ),
        (
            {"type": "video", "video": "data:video/mp4;base64,@@@"},
            400,
            "messages[0].content[1].video",
            "invalid_base64",
        ),
        ({"type": "video"}, 400, "messages[0].content[1].video", "invalid_value"),
        (
            {"type": "video", "video": "ftp://example.invalid/a.mp4"},
            400,
            "messages[0].content[1].video",
            "invalid_value",
        ),
        (
            {"type": "video_url", "video_url": {"url": "https://example.invalid/a.mp4"}},
            400,
            "messages[0].content[1].video_url.url",
            "url_fetch_disabled",
        ),
        (
            {"type": "video_url", "video_url": {"url": video_data_url(0, seconds=4.0)}},
            413,
            "messages[0].content[1].video_url.url",
            "media_too_large",
        ),
    ],
)
async def test_bad_video_parts_are_refused_naming_the_part(settings, part, status, param, code):
    settings.FETCH_MEDIA_URLS = False
    settings.MAX_MEDIA_BYTES = 2048
    with pytest.raises(ApiError) as raised:
        await prepare_messages(video_message(part))
    assert (raised.value.status, raised.value.param, raised.value.code) == (status, param, code)


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that declares a size and holds no pixels: what a decompression bomb looks like to Image.open."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


def test_an_image_with_too_many_pixels_is_refused_naming_its_field():
    with pytest.raises(ApiError) as raised:
        decode_image_bytes(png_header_only(20000, 20000), "image")
    assert (raised.value.status, raised.value.param, raised.value.code) == (413, "image", "media_too_large")


@pytest.mark.parametrize("fmt", ["wav", "flac", "mp3", "opus"])
def test_audio_containers_decode_back(fmt):
    rate = 24000
    samples = (0.3 * np.sin(2 * np.pi * 220 * np.arange(rate) / rate)).astype(np.float32)
    data = audio_encoding.encode_audio(samples, rate, fmt)
    decoded, decoded_rate = soundfile.read(io.BytesIO(data), dtype="float32")
    assert decoded_rate == rate
    assert abs(len(decoded) - rate) < 2000
    if fmt in ("wav", "flac"):
        assert np.abs(decoded - samples).max() < 1e-3
    assert audio_encoding.normalize_format("pcm") == "pcm16" and audio_encoding.normalize_format("aiff") is None
    assert len(audio_encoding.encode_audio(samples, rate, "pcm16")) == 2 * rate


def test_streaming_wav_header_then_pcm_reads_as_wav():
    samples = np.linspace(-0.5, 0.5, 800, dtype=np.float32)
    stream = audio_encoding.wav_header(8000) + audio_encoding.pcm16_bytes(samples)
    import wave

    with wave.open(io.BytesIO(stream)) as wav:
        assert wav.getframerate() == 8000 and len(wav.readframes(10_000)) == 2 * 800


def test_signed_tokens_round_trip_and_expire():
    token = artifact_token("0b5e2a4e-1111-4c3d-9b7a-2f1e0c9d8a71")
    assert artifact_id_from_token(token) == "0b5e2a4e-1111-4c3d-9b7a-2f1e0c9d8a71"
    assert artifact_id_from_token(token[:-2] + "xx") is None
    assert artifact_id_from_token(token, max_age_s=-1) is None


def test_sampling_params_list_sets_each_stage_over_the_deployment_s_defaults():
    pipeline = PipelineConfig(
        family="t",
        name="t",
        stages=[
            StageConfig(id=0, name="thinker", kind="ar", output="text", default_sampling={"temperature": 0.7}),
            StageConfig(id=1, name="talker", kind="ar"),
            StageConfig(id=2, name="dit", kind="diffusion", output="image"),
        ],
        edges=[EdgeConfig(source=0, target=1), EdgeConfig(source=1, target=2)],
    )
    plain = DeployConfig()
    entry, later, knobs = build_sampling(
        pipeline,
        plain,
        {"max_tokens": 5},
        [{"top_k": 3}, {"temperature": 0.0, "max_tokens": 9}, {"num_inference_steps": 4}],
    )
    assert (entry.temperature, entry.top_k, entry.max_tokens) == (0.7, 3, 5)
    assert later["talker"].max_tokens == 9 and later["talker"].temperature == 0.0
    assert knobs.fields() == {"num_inference_steps": 4}
    with pytest.raises(ApiError) as bad:
        build_sampling(pipeline, plain, {}, [{}, {"top_p": 7}])
    assert bad.value.param == "sampling_params_list[1].top_p"
    with pytest.raises(ApiError) as bad:  # a diffusion stage's entry sets the knobs, checked the same way
        build_sampling(pipeline, plain, {}, [{}, {}, {"guidance_scale": -1}])
    assert bad.value.status == 400 and bad.value.param == "sampling_params_list[2].guidance_scale"

    # The deployment's per-stage sampling sits between the pipeline's defaults and the request.
    capped = DeployConfig(
        stages={
            "thinker": StageDeployConfig(sampling={"max_tokens": 8, "top_k": 2}),
            "talker": StageDeployConfig(sampling={"top_k": 7}),
        }
    )
    entry, later, _ = build_sampling(pipeline, capped, {"top_k": 4}, [{}, {"max_tokens": 9}])
    assert (entry.temperature, entry.top_k, entry.max_tokens) == (0.7, 4, 8)
    assert (later["talker"].top_k, later["talker"].max_tokens) == (7, 9)
