"""The tiny Qwen2.5-Omni (thinker -> talker -> code2wav on Celery-hosted replicas) behind the routes
an omni user calls beside chat: its voices (`/v1/audio/voices`), OpenAI's voice names refused with
the list of its own unless the deployment maps them to its default voice, responses that speak and
that carry the conversation (`previous_response_id`), and raw-prompt completions (no template)."""

from __future__ import annotations

import openai
import pytest

from control_plane.inference.models import InferenceRequest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

SHORT = {"stages": {"talker": {"sampling": {"max_tokens": 24}}}}


def test_omni_voices_responses_and_raw_completions(serving_stack, tiny_omni):
    serving_stack.deploy(
        "omni", "qwen2_5_omni", model_dir=str(tiny_omni), deploy_config={**SHORT, "map_openai_voices": True}
    )
    serving_stack.deploy("omni-strict", "qwen2_5_omni", model_dir=str(tiny_omni), deploy_config=SHORT)
    serving_stack.wait_running("omni", "omni-strict", timeout=600)
    client = serving_stack.client(timeout=300)

    def voices(model: str | None) -> dict:
        return client.get("/audio/voices", cast_to=object, options={"params": {"model": model} if model else {}})

    listed = voices("omni")
    assert listed["voices"] == ["Chelsie", "Ethan"] and listed["default_voice"] == "Chelsie"
    assert [v["object"] for v in listed["data"]] == ["audio.voice"] * 2 and listed["data"][0]["default"]
    assert listed["openai_voice_aliases"]["alloy"] == "Chelsie"
    strict = voices("omni-strict")
    assert strict["voices"] == ["Chelsie", "Ethan"] and strict["openai_voice_aliases"] == {}
    for model, error, param in ((None, openai.BadRequestError, "model"), ("nope", openai.NotFoundError, "model")):
        with pytest.raises(error) as refused:
            voices(model)
        assert refused.value.body["param"] == param

    speech = client.audio.speech.create(model="omni", input="hi", voice="alloy", response_format="wav")
    assert speech.content[:4] == b"RIFF"
    assert client.audio.speech.create(model="omni-strict", input="hi", voice="Ethan", response_format="wav").content
    with pytest.raises(openai.BadRequestError) as refused:
        client.audio.speech.create(model="omni-strict", input="hi", voice="alloy")
    assert refused.value.body["param"] == "voice" and "Chelsie" in refused.value.body["message"]

    alone = client.responses.create(model="omni", input="Say something.", max_output_tokens=16)
    follow = client.responses.create(model="omni", input="Say something.", previous_response_id=alone.id,
                                     max_output_tokens=16)  # fmt: skip
    assert alone.output_text and follow.output_text
    assert follow.usage.input_tokens > alone.usage.input_tokens + 4  # the first turn and its answer went in again

    spoken = client.responses.create(model="omni", input="Hello.", max_output_tokens=16,
                                     extra_body={"modalities": ["text", "audio"], "audio": {"voice": "alloy"}})  # fmt: skip
    text, audio = spoken.output[0].content
    assert audio.type == "output_audio" and audio.data and audio.transcript == text.text

    raw = client.completions.create(model="omni", prompt="The sky is", max_tokens=5)
    chat = client.chat.completions.create(
        model="omni", messages=[{"role": "user", "content": "The sky is"}], max_tokens=5, modalities=["text"]
    )
    assert raw.usage.completion_tokens == 5 and raw.choices[0].text
    assert raw.usage.prompt_tokens < chat.usage.prompt_tokens  # no system prompt, no chat markup around it

    serving_stack.history_written()
    row = InferenceRequest.objects.get(request_id=raw.id)
    assert row.status == "completed" and "audio" not in row.usage
    assert set(row.stage_metrics) == {"thinker"}  # text only: the talker and code2wav never ran
    assert set(InferenceRequest.objects.get(request_id=spoken.id).stage_metrics) == {"thinker", "talker", "code2wav"}
