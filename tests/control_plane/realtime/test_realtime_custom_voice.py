"""A realtime session on the tiny Qwen2.5-Omni speaking with the user's custom voice (made with
`POST /v1/audio/voices` from a generated wav clip); another user's session naming it fails the
response with the list of the model's voices."""

from __future__ import annotations

import asyncio
import io

import httpx
import numpy as np
import pytest
import soundfile
from openai import AsyncOpenAI

from control_plane.accounts.services import api_key_create

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(1500),  # building, deploying and speaking with the tiny omni on a loaded machine
]


def wav_clip(seconds: float = 4.0, rate: int = 16000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    signal = 0.2 * sum(np.sin(2 * np.pi * 150.0 * k * t) / k for k in range(1, 9))
    buffer = io.BytesIO()
    soundfile.write(buffer, signal.astype(np.float32), rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


async def respond(stack, secret: str, voice: str):
    client = AsyncOpenAI(api_key=secret, base_url=f"{stack.base}/v1", websocket_base_url=f"{stack.ws_base}/v1",
                         max_retries=0)  # fmt: skip
    audio = 0
    async with client.realtime.connect(model="omni") as connection:
        await connection.session.update(session={"type": "realtime", "max_output_tokens": 8,
                                                 "audio": {"output": {"voice": voice}}})  # fmt: skip
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hello."}]}
        await connection.conversation.item.create(item=item)
        await connection.response.create()
        async with asyncio.timeout(600):
            async for event in connection:
                if event.type == "response.output_audio.delta":
                    audio += len(event.delta)
                if event.type == "response.done":
                    return event.response, audio


async def test_a_custom_voice_in_realtime(realtime_stack, tiny_omni, django_user_model):
    short = {"stages": {"talker": {"sampling": {"max_tokens": 16}}}}
    realtime_stack.deploy("omni", "qwen2_5_omni", short, model_dir=str(tiny_omni))
    await asyncio.to_thread(realtime_stack.wait_running, "omni", timeout=600)
    made = await asyncio.to_thread(httpx.post, f"{realtime_stack.base}/v1/audio/voices", timeout=300,
                                   headers={"Authorization": f"Bearer {realtime_stack.user_secret}"},
                                   data={"name": "mine", "model": "omni"},
                                   files={"file": ("me.wav", wav_clip(), "audio/wav")})  # fmt: skip
    assert made.status_code == 200, made.text

    spoken, audio = await respond(realtime_stack, realtime_stack.user_secret, "mine")
    assert spoken.status == "completed", spoken.status_details
    assert audio > 0

    other = await asyncio.to_thread(django_user_model.objects.create_user, "realtime-other", password="x")
    _, secret = await asyncio.to_thread(api_key_create, user=other, name="other", scopes=["inference"])
    refused, _ = await respond(realtime_stack, secret, "mine")
    assert refused.status == "failed"
    assert "['Chelsie', 'Ethan']" in refused.status_details.error.message
