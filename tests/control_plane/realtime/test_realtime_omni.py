"""The tiny Qwen2.5-Omni (thinker -> talker -> code2wav) behind /v1/realtime, driven by the
OpenAI SDK with a spoken WAV: the user's audio reaches the thinker as an audio part, text
and 24 kHz audio come back."""

from __future__ import annotations

import asyncio
import base64

import pytest
from asgiref.sync import sync_to_async
from openai import AsyncOpenAI
from realtime_helpers import chunks_of, pcm16_b64, silence

from control_plane.inference.models import InferenceRequest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]


async def test_sdk_session_over_the_tiny_omni_model(realtime_stack, tiny_omni, spoken_hello):
    realtime_stack.deploy("omni", "qwen2_5_omni", {}, model_dir=str(tiny_omni))
    realtime_stack.wait_running("omni", timeout=600)
    client = AsyncOpenAI(api_key=realtime_stack.user_secret, base_url=f"{realtime_stack.base}/v1",
                         websocket_base_url=f"{realtime_stack.ws_base}/v1", max_retries=0)  # fmt: skip
    async with client.realtime.connect(model="omni") as connection:
        await connection.session.update(session={"type": "realtime", "max_output_tokens": 30})
        for chunk in chunks_of(silence(0.3)):
            await connection.input_audio_buffer.append(audio=pcm16_b64(chunk))
        for chunk in chunks_of(spoken_hello):
            await connection.input_audio_buffer.append(audio=pcm16_b64(chunk))
        for chunk in chunks_of(silence(1.0)):
            await connection.input_audio_buffer.append(audio=pcm16_b64(chunk))
        events = []
        async with asyncio.timeout(600):
            async for event in connection:
                events.append(event)
                if event.type == "rate_limits.updated" and any(e.type == "response.done" for e in events):
                    break  # sent once the response is in the history
    done = next(e for e in events if e.type == "response.done").response
    assert done.status == "completed", done.status_details
    assert [e for e in events if e.type == "response.output_audio_transcript.delta"]
    audio = b"".join(base64.b64decode(e.delta) for e in events if e.type == "response.output_audio.delta")
    assert len(audio) > 0
    assert done.usage.output_token_details.audio_tokens == 30  # max_output_tokens bounds the talker's codes too
    await sync_to_async(realtime_stack.history_written)()
    row = await sync_to_async(InferenceRequest.objects.get)(request_id=done.id)
    assert row.status == "completed" and row.ttfp_s > 0
    assert row.inputs["messages"][-1]["content"][0]["type"] == "input_audio"  # the thinker heard the user
