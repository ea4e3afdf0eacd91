"""A deployment whose checkpoint directory holds no weights (the tiny Qwen2.5-Omni's configs, tokenizer,
processor and voices) with `load_format: dummy` on every stage, through the live platform: it warms up
to RUNNING on a Celery-hosted replica per stage and answers a chat with text and 24 kHz audio, every
stage (thinker, talker, code2wav) having run; without `load_format` the same directory fails to deploy
and says why."""

from __future__ import annotations

import base64
import io
import wave

import pytest
from procs import wait_for

from control_plane.inference.models import InferenceRequest
from stages.models.dummy_weights import has_weights, without_weights

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.timeout(1500)]

DUMMY = {"load_format": "dummy"}


@pytest.fixture
def platform_env(platform_env):
    """The production heartbeat TTL: three replica hosts loading torch at once on a loaded 2-core machine
    can miss the suite's 1.5 s and be replaced before they are up (this test is not about liveness)."""
    return {**platform_env, "OMNISTAGE_HEARTBEAT_INTERVAL": "1", "OMNISTAGE_HEARTBEAT_TTL": "10"}


@pytest.fixture(scope="module")
def omni_configs(tiny_omni, tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    configs = without_weights(tiny_omni, root / "qwen2_5_omni_configs")
    assert not has_weights(configs)
    return configs


def test_a_dummy_weight_omni_deployment_answers_with_text_and_audio(serving_stack, omni_configs):
    deploy = {
        "stages": {
            "thinker": DUMMY,
            "talker": {**DUMMY, "sampling": {"max_tokens": 24}},
            "code2wav": DUMMY,
        }
    }
    serving_stack.deploy("omni-dummy", "qwen2_5_omni", model_dir=str(omni_configs), deploy_config=deploy)
    serving_stack.wait_running("omni-dummy", timeout=600)
    reply = serving_stack.client(timeout=300).chat.completions.create(
        model="omni-dummy",
        modalities=["text", "audio"],
        audio={"voice": "Chelsie", "format": "wav"},
        messages=[{"role": "user", "content": "Hello there"}],
        max_tokens=8,
    )
    message = reply.choices[0].message
    audio_tokens = reply.usage.completion_tokens_details.audio_tokens
    assert message.content and (reply.usage.completion_tokens - audio_tokens, audio_tokens) == (8, 24)
    with wave.open(io.BytesIO(base64.b64decode(message.audio.data))) as audio:
        assert audio.getframerate() == 24000 and audio.getnframes() > 0
    serving_stack.history_written()
    row = InferenceRequest.objects.get(request_id=reply.id)
    assert row.status == "completed"
    assert {"thinker", "talker", "code2wav"} <= set(row.stage_metrics)


def test_the_same_directory_without_load_format_fails_to_deploy_and_says_why(serving_stack, omni_configs):
    serving_stack.deploy("omni-no-weights", "qwen2_5_omni_thinker", model_dir=str(omni_configs))

    def explained():  # the replica's error, kept while it restarts with backoff
        body = serving_stack.http("GET", "/api/deployments/omni-no-weights/", secret=serving_stack.operator_secret)
        return body.json() if "load_format dummy" in body.text else None

    deployment = wait_for(explained, timeout=300, interval=0.5, what="the missing weights explained")
    assert deployment["state"] != "RUNNING"
