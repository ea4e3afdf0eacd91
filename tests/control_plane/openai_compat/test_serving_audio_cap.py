"""The tiny Qwen2.5-Omni's talker does not stop by itself (random weights): its audio is bounded
by the default cap (3 s + 0.5 s per text token), by a request's `max_audio_seconds` and by the
deployment's, and a request cannot ask for more than the deployment allows."""

from __future__ import annotations

import base64
import io
import wave

import pytest
from procs import REPO

from stages.audio_cap import audio_seconds_cap, talker_codes_cap

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

OMNI_DIR = str(REPO / "var" / "models" / "qwen2_5_omni")
TEXT_TOKENS = 4


def spoken_seconds(stack, model: str, **extra) -> float:
    body = {"model": model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": TEXT_TOKENS,
            "modalities": ["text", "audio"], "audio": {"voice": "Chelsie", "format": "wav"}, **extra}  # fmt: skip
    reply = stack.http("POST", "/v1/chat/completions", json=body, timeout=600)
    assert reply.status_code == 200, reply.text
    data = base64.b64decode(reply.json()["choices"][0]["message"]["audio"]["data"])
    with wave.open(io.BytesIO(data), "rb") as reader:
        return reader.getnframes() / reader.getframerate()


def test_the_default_cap():
    assert audio_seconds_cap(16) == 11.0
    assert audio_seconds_cap(10_000) == 120.0
    assert audio_seconds_cap(16, requested=60.0) == 60.0
    assert audio_seconds_cap(16, requested=60.0, ceiling=30.0) == 30.0
    assert talker_codes_cap("qwen2_5_omni", 2.0) == 100 and talker_codes_cap("echo", 2.0) is None


def test_audio_is_capped_by_default_per_request_and_per_deployment(serving_stack, repo_tiny_models):
    serving_stack.deploy("omni", "qwen2_5_omni", model_dir=OMNI_DIR)
    serving_stack.deploy("omni-short", "qwen2_5_omni", model_dir=OMNI_DIR, deploy_config={"max_audio_seconds": 1.5})
    serving_stack.wait_running("omni", "omni-short", timeout=600)

    default = spoken_seconds(serving_stack, "omni")
    assert 0 < default <= audio_seconds_cap(TEXT_TOKENS) + 0.1, default  # 5 s, where the talker would make 41
    assert 0 < spoken_seconds(serving_stack, "omni", max_audio_seconds=1.0) <= 1.1
    assert 0 < spoken_seconds(serving_stack, "omni-short") <= 1.6

    body = {"model": "omni-short", "messages": [{"role": "user", "content": "Hello"}], "max_audio_seconds": 10}
    refused = serving_stack.http("POST", "/v1/chat/completions", json=body)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "max_audio_seconds"
