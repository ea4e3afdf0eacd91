"""Invalid input over every /v1 route: never a 5xx, always OpenAI's error shape with the
right status; capacity and quota refusals carry Retry-After; failed requests are recorded."""

from __future__ import annotations

import base64
import io
import json
import re
import time

import pytest

from control_plane.accounts.models import Metric, Quota, Window
from control_plane.accounts.services import api_key_create
from control_plane.inference.models import InferenceRequest

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def png_bytes(width: int = 2, height: int = 2) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


TEXT = [{"role": "user", "content": "hi"}]


def chat(**fields):
    return {"model": "echo", "messages": TEXT, **fields}


def image_part(url: str) -> list[dict]:
    return [
        {
            "role": "user",
            "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": url}}],
        }
    ]


# (name, method, path, request kwargs, status, param)
MATRIX = [
    ("malformed json", "POST", "/v1/chat/completions", {"content": b"{not json", "headers": {"Content-Type": "application/json"}}, 400, None),
    ("body not an object", "POST", "/v1/chat/completions", {"json": ["model"]}, 400, None),
    ("missing model", "POST", "/v1/chat/completions", {"json": {"messages": TEXT}}, 400, "model"),
    ("missing messages", "POST", "/v1/chat/completions", {"json": {"model": "echo"}}, 400, "messages"),
    ("messages wrong type", "POST", "/v1/chat/completions", {"json": chat(messages="hi")}, 400, "messages"),
    ("model wrong type", "POST", "/v1/chat/completions", {"json": chat(model=5)}, 400, "model"),
    ("empty messages", "POST", "/v1/chat/completions", {"json": chat(messages=[])}, 400, "messages"),
    ("bad role", "POST", "/v1/chat/completions", {"json": chat(messages=[{"role": "robot", "content": "x"}])}, 400, "messages[0].role"),
    ("unknown part type", "POST", "/v1/chat/completions", {"json": chat(messages=[{"role": "user", "content": [{"type": "hologram"}]}])}, 400, "messages[0].content[0].type"),
    ("unknown model", "POST", "/v1/chat/completions", {"json": chat(model="no-such-model")}, 404, "model"),
    ("unsupported modality", "POST", "/v1/chat/completions", {"json": chat(modalities=["audio"])}, 400, "modalities"),
    ("modalities wrong type", "POST", "/v1/chat/completions", {"json": chat(modalities="text")}, 400, "modalities"),
    ("bad audio format", "POST", "/v1/chat/completions", {"json": chat(model="echo-voice", modalities=["text", "audio"], audio={"voice": "a", "format": "aiff"})}, 400, "audio.format"),
    ("streamed mp3", "POST", "/v1/chat/completions", {"json": chat(model="echo-voice", modalities=["audio"], audio={"format": "mp3"}, stream=True)}, 400, "audio.format"),
    ("bad image data url", "POST", "/v1/chat/completions", {"json": chat(messages=image_part("data:image/png;base64,@@@"))}, 400, "messages[0].content[1].image_url.url"),
    ("not an image", "POST", "/v1/chat/completions", {"json": chat(messages=image_part("data:image/png;base64," + base64.b64encode(b"hello").decode()))}, 400, "messages[0].content[1].image_url.url"),
    ("remote url fetch off", "POST", "/v1/chat/completions", {"json": chat(messages=image_part("http://example.invalid/cat.png"))}, 400, "messages[0].content[1].image_url.url"),
    ("bad video data url", "POST", "/v1/chat/completions", {"json": chat(messages=[{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "data:video/mp4;base64,@@@"}}]}])}, 400, "messages[0].content[0].video_url.url"),
    ("video part not a video", "POST", "/v1/chat/completions", {"json": chat(messages=[{"role": "user", "content": [{"type": "video", "video": "data:image/png;base64,AAAA"}]}])}, 400, "messages[0].content[0].video"),
    ("bad audio input", "POST", "/v1/chat/completions", {"json": chat(messages=[{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": base64.b64encode(b"noise").decode(), "format": "wav"}}]}])}, 400, "messages[0].content[0].input_audio.data"),
    ("n out of range", "POST", "/v1/chat/completions", {"json": chat(n=0)}, 400, "n"),
    ("n above one", "POST", "/v1/chat/completions", {"json": chat(n=2)}, 400, "n"),
    ("temperature range", "POST", "/v1/chat/completions", {"json": chat(temperature=-1)}, 400, "temperature"),
    ("max_tokens zero", "POST", "/v1/chat/completions", {"json": chat(max_tokens=0)}, 400, "max_tokens"),
    ("max_tokens string", "POST", "/v1/chat/completions", {"json": chat(max_tokens="ten")}, 400, "max_tokens"),
    ("stream wrong type", "POST", "/v1/chat/completions", {"json": chat(stream="yes")}, 400, "stream"),
    ("sampling list item", "POST", "/v1/chat/completions", {"json": chat(sampling_params_list=[{"temperature": "hot"}])}, 400, "sampling_params_list[0].temperature"),
    ("sampling list too long", "POST", "/v1/chat/completions", {"json": chat(sampling_params_list=[{}, {}, {}])}, 400, "sampling_params_list"),
    ("sampling unknown field", "POST", "/v1/chat/completions", {"json": chat(sampling_params_list=[{"warp": 9}])}, 400, "sampling_params_list[0].warp"),
    ("oversized body", "POST", "/v1/chat/completions", {"content": b'{"model": "echo", "pad": "' + b"x" * (21 * 1024 * 1024) + b'"}', "headers": {"Content-Type": "application/json"}}, 413, None),
    ("wrong content type", "POST", "/v1/chat/completions", {"content": b"<xml/>", "headers": {"Content-Type": "application/xml"}}, 415, None),
    ("wrong method", "GET", "/v1/chat/completions", {}, 405, None),
    ("unknown route", "GET", "/v1/nothing/here", {}, 404, None),
    ("trailing slash", "POST", "/v1/chat/completions/", {"json": chat()}, 404, None),
    ("completions missing prompt", "POST", "/v1/completions", {"json": {"model": "echo"}}, 400, "prompt"),
    ("completions bad prompt", "POST", "/v1/completions", {"json": {"model": "echo", "prompt": {"a": 1}}}, 400, "prompt"),
    ("transcription of a file that is not audio", "POST", "/v1/audio/transcriptions", {"data": {"model": "echo-voice"}, "files": {"file": ("a.wav", b"RIFF")}}, 400, "file"),
    ("responses missing input", "POST", "/v1/responses", {"json": {"model": "echo"}}, 400, "input"),
    ("voices of a model that does not speak", "GET", "/v1/audio/voices?model=echo", {}, 400, "model"),
    ("speech empty input", "POST", "/v1/audio/speech", {"json": {"model": "echo-voice", "input": " ", "voice": "a"}}, 400, "input"),
    ("speech bad format", "POST", "/v1/audio/speech", {"json": {"model": "echo-voice", "input": "x", "response_format": "aiff"}}, 400, "response_format"),
    ("speech speed", "POST", "/v1/audio/speech", {"json": {"model": "echo-voice", "input": "x", "speed": 9}}, 400, "speed"),
    ("speech stream format", "POST", "/v1/audio/speech", {"json": {"model": "echo-voice", "input": "x", "stream_format": "video"}}, 400, "stream_format"),
    ("speech streamed mp3", "POST", "/v1/audio/speech", {"json": {"model": "echo-voice", "input": "x", "stream": True, "response_format": "mp3"}}, 400, "response_format"),
    ("speech text model", "POST", "/v1/audio/speech", {"json": {"model": "echo", "input": "x"}}, 400, "model"),
    ("speech missing input", "POST", "/v1/audio/speech", {"json": {"model": "echo-voice"}}, 400, "input"),
    ("images n high", "POST", "/v1/images/generations", {"json": {"model": "echo", "prompt": "cat", "n": 11}}, 400, "n"),
    ("images n zero", "POST", "/v1/images/generations", {"json": {"model": "echo", "prompt": "cat", "n": 0}}, 400, "n"),
    ("images size", "POST", "/v1/images/generations", {"json": {"model": "echo", "prompt": "cat", "size": "huge"}}, 400, "size"),
    ("images response format", "POST", "/v1/images/generations", {"json": {"model": "echo", "prompt": "cat", "response_format": "file"}}, 400, "response_format"),
    ("images output format", "POST", "/v1/images/generations", {"json": {"model": "echo", "prompt": "cat", "output_format": "bmp"}}, 400, "output_format"),
    ("images text model", "POST", "/v1/images/generations", {"json": {"model": "echo", "prompt": "cat"}}, 400, "model"),
    ("images missing prompt", "POST", "/v1/images/generations", {"json": {"model": "echo"}}, 400, "prompt"),
    ("edits not multipart", "POST", "/v1/images/edits", {"json": {"model": "echo", "prompt": "cat"}}, 415, None),
    ("edits missing image", "POST", "/v1/images/edits", {"data": {"model": "echo", "prompt": "cat"}, "files": {"other": ("a.txt", b"x")}}, 400, "image"),
    ("edits bad image", "POST", "/v1/images/edits", {"data": {"model": "echo", "prompt": "cat"}, "files": {"image": ("a.png", b"not a png", "image/png")}}, 400, "image"),
    ("edits text model", "POST", "/v1/images/edits", {"data": {"model": "echo", "prompt": "cat"}, "files": {"image": ("a.png", png_bytes(), "image/png")}}, 400, "model"),
    ("videos missing prompt", "POST", "/v1/videos", {"data": {"model": "echo"}, "files": {"x": ("a", b"")}}, 400, "prompt"),
    ("videos bad seconds", "POST", "/v1/videos", {"data": {"model": "echo", "prompt": "p", "seconds": "four"}, "files": {"x": ("a", b"")}}, 400, "seconds"),
    ("videos text model", "POST", "/v1/videos", {"json": {"model": "echo", "prompt": "p"}}, 400, "model"),
    ("videos unknown id", "GET", "/v1/videos/video_nope", {}, 404, "video_id"),
    ("videos content unknown", "GET", "/v1/videos/video_nope/content", {}, 404, "video_id"),
    ("videos list limit", "GET", "/v1/videos?limit=0", {}, 400, "limit"),
    ("model detail unknown", "GET", "/v1/models/nope", {}, 404, "model"),
    ("signed url forged", "GET", "/v1/files/forged-token/content", {}, 403, None),
    ("not running", "POST", "/v1/chat/completions", {"json": chat(model="echo-parked")}, 503, "model"),
]  # fmt: skip


def check_error_shape(response, status: int, param: str | None, name: str) -> dict:
    assert response.status_code == status, f"{name}: {response.status_code} {response.text[:300]}"
    body = response.json()
    assert set(body) == {"error"}, name
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, name
    assert isinstance(error["message"], str) and error["message"], name
    assert isinstance(error["type"], str) and error["type"], name
    if param is not None:
        assert error["param"] == param, f"{name}: param {error['param']!r} != {param!r} ({error['message']})"
    return error


def test_invalid_input_matrix_never_answers_5xx(echo_stack, serving_users, django_user_model, repo_tiny_models):
    invalid_input_matrix(echo_stack, serving_users, repo_tiny_models / "qwen2")
    quota_and_engine_failures(echo_stack, django_user_model)


def invalid_input_matrix(echo_stack, serving_users, llm_checkpoint):
    # an llm deployment parked on a pool without workers (never RUNNING) and a stopped echo
    echo_stack.deploy("llm-parked", "llm", str(llm_checkpoint), deploy_config={"stages": {"llm": {"pool": "gpu"}}})
    echo_stack.deploy("echo-parked", "echo", deploy_config={"stages": {"echo": {"pool": "gpu"}}})

    for name, method, path, kwargs, status, param in MATRIX:
        response = echo_stack.http(method, path, **kwargs)
        assert response.status_code < 500 or status >= 500, f"{name}: {response.status_code} {response.text[:300]}"
        check_error_shape(response, status, param, name)
        if status == 503:
            assert int(response.headers["Retry-After"]) >= 1

    unauthenticated = echo_stack.http("POST", "/v1/chat/completions", json=chat(), headers={"Authorization": ""})
    check_error_shape(unauthenticated, 401, None, "no key")
    bad_key = echo_stack.http("POST", "/v1/chat/completions", secret="omni-not-a-key", json=chat())
    check_error_shape(bad_key, 401, None, "bad key")
    user = serving_users["user"][0]
    _, read_only = api_key_create(user=user, name="ro", scopes=["deployments:read"])
    check_error_shape(echo_stack.http("GET", "/v1/models", secret=read_only), 403, None, "no inference scope")
    _, only_voice = api_key_create(user=user, name="voice", scopes=["inference"], allowed_deployments=["echo-voice"])
    check_error_shape(
        echo_stack.http("POST", "/v1/chat/completions", secret=only_voice, json=chat()), 404, "model", "not allowed"
    )
    listed = echo_stack.http("GET", "/v1/models", secret=only_voice).json()
    assert [model["id"] for model in listed["data"]] == ["echo-voice"]

    # requests that reached a route are recorded as failed, with the error they answered
    echo_stack.history_written()
    failed = InferenceRequest.objects.filter(user=user, status="failed")
    assert failed.filter(http_status=404, deployment_name="no-such-model").exists()
    assert failed.filter(http_status=400, error__param="modalities", deployment_name="echo").exists()
    assert failed.filter(http_status=503, deployment_name="echo-parked").exists()
    assert failed.filter(route="audio.speech").exists()
    assert not failed.filter(http_status=413).exists()  # an oversized body is refused at the edge, unread


def wait_for_a_fresh_minute(margin_s: float = 5.0) -> None:
    """Quota windows are fixed UTC minutes (on this machine's clock, which Redis shares): two
    requests that must land in the same window start well inside one."""
    left = 60 - time.time() % 60
    if left < margin_s:
        time.sleep(left + 0.05)


def quota_and_engine_failures(echo_stack, django_user_model):
    limited = django_user_model.objects.create_user("limited", password="x")
    _, secret = api_key_create(user=limited, name="limited", scopes=["inference"])
    Quota.objects.create(user=limited, metric=Metric.REQUESTS, window=Window.MINUTE, limit=1)
    wait_for_a_fresh_minute()
    admitted = echo_stack.http("POST", "/v1/chat/completions", secret=secret, json=chat())
    assert admitted.status_code == 200 and admitted.headers["x-ratelimit-remaining-requests"] == "0"
    refused = echo_stack.http("POST", "/v1/chat/completions", secret=secret, json=chat())
    error = check_error_shape(refused, 429, None, "quota")
    assert error["code"] == "rate_limit_exceeded" and int(refused.headers["Retry-After"]) >= 1
    assert int(refused.headers["retry-after-ms"]) >= 1000
    assert refused.headers["x-ratelimit-limit-requests"] == "1"
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert re.fullmatch(r"(\d+m)?\d+s|\d+ms", refused.headers["x-ratelimit-reset-requests"])  # within the minute
    echo_stack.history_written()
    assert InferenceRequest.objects.filter(user=limited, http_status=429, status="failed").count() == 1

    bad_sampling = echo_stack.http("POST", "/v1/chat/completions", json=chat(sampling_params_list=[{"max_tokens": 0}]))
    check_error_shape(bad_sampling, 400, "sampling_params_list[0].max_tokens", "bad entry sampling")

    # an engine's own failure is a 500 in OpenAI's shape, before any stream starts, and recorded
    for stream in (False, True):
        failing = echo_stack.http(
            "POST", "/v1/chat/completions", json=chat(stream=stream, additional_information={"echo_fail": True})
        )
        assert check_error_shape(failing, 500, None, f"engine failure stream={stream}")["code"] == "echo_fail"
    echo_stack.history_written()
    assert InferenceRequest.objects.filter(status="failed", http_status=500, error__code="echo_fail").count() == 2
    body = json.dumps(chat(stream=True)).encode()
    ok = echo_stack.http("POST", "/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
    assert ok.status_code == 200 and ok.text.rstrip().endswith("data: [DONE]")
