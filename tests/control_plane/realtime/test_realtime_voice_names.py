"""A realtime session asking for one of OpenAI's voices (`alloy`) on the tiny Qwen2.5-Omni: the
deployment that maps OpenAI's names speaks with its default voice; the one that does not fails the
response with the list of the model's voices."""

from __future__ import annotations

import asyncio

import pytest
from openai import AsyncOpenAI

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]


async def respond(stack, model: str):
    client = AsyncOpenAI(api_key=stack.user_secret, base_url=f"{stack.base}/v1",
                         websocket_base_url=f"{stack.ws_base}/v1", max_retries=0)  # fmt: skip
    async with client.realtime.connect(model=model) as connection:
        await connection.session.update(session={"type": "realtime", "max_output_tokens": 12,
                                                 "audio": {"output": {"voice": "alloy"}}})  # fmt: skip
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hello."}]}
        await connection.conversation.item.create(item=item)
        await connection.response.create()
        async with asyncio.timeout(600):
            async for event in connection:
                if event.type == "response.done":
                    return event.response


async def test_openai_voice_names_in_realtime(realtime_stack, tiny_omni):
    realtime_stack.deploy("omni", "qwen2_5_omni", {"map_openai_voices": True}, model_dir=str(tiny_omni))
    realtime_stack.deploy("omni-strict", "qwen2_5_omni", {}, model_dir=str(tiny_omni))
    await asyncio.to_thread(realtime_stack.wait_running, "omni", "omni-strict", timeout=600)

    mapped = await respond(realtime_stack, "omni")
    assert mapped.status == "completed", mapped.status_details
    refused = await respond(realtime_stack, "omni-strict")
    assert refused.status == "failed"
    assert "Chelsie" in refused.status_details.error.message
