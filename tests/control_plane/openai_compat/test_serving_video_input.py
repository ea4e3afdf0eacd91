"""A video chat part through the live server: the tiny Qwen2.5-Omni thinker (the thinker-only
pipeline on a Celery-hosted replica) answers a clip sent as a data URL through the official SDK;
a corrupt clip, which passes the control plane's type/base64/size checks, fails at the thinker's
host with a 400 naming its part. The history row keeps the part without its bytes."""

from __future__ import annotations

import base64

import openai
import pytest
from video_samples import video_data_url

from control_plane.inference.models import InferenceRequest

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def video_messages(url: str) -> list[dict]:
    return [
        {
            "role": "user",
            "content": [{"type": "video_url", "video_url": {"url": url}}, {"type": "text", "text": "What happens?"}],
        }
    ]


def test_video_chat_through_the_sdk(serving_stack, tiny_omni):
    serving_stack.deploy("omni-thinker", "qwen2_5_omni_thinker", model_dir=str(tiny_omni))
    serving_stack.wait_running("omni-thinker", timeout=600)
    client = serving_stack.client(timeout=300)

    def ask(url: str):
        return client.chat.completions.create(model="omni-thinker", messages=video_messages(url), max_tokens=8)

    first, again, other = ask(video_data_url(0)), ask(video_data_url(0)), ask(video_data_url(1))
    assert first.choices[0].message.content and first.usage.completion_tokens == 8
    assert again.choices[0].message.content == first.choices[0].message.content  # greedy by default
    assert other.choices[0].message.content != first.choices[0].message.content
    serving_stack.history_written()
    row = InferenceRequest.objects.get(request_id=first.id)
    assert row.status == "completed"
    assert row.inputs["messages"][0]["content"][0]["video_url"]["url"].startswith("<video/mp4 data, ")

    corrupt = "data:video/mp4;base64," + base64.b64encode(b"\x00" * 256).decode()
    with pytest.raises(openai.BadRequestError) as raised:
        ask(corrupt)
    assert raised.value.body["param"] == "messages[0].content[0].video_url.url"
    assert "could not decode the video" in raised.value.body["message"]
