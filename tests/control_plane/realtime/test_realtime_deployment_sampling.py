"""A deployment's per-stage sampling bounds realtime responses (the first stage's max_tokens
here), and a session's max_output_tokens overrides it."""

from __future__ import annotations

import pytest
from realtime_helpers import events_until, send
from websockets.asyncio.client import connect

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SHORT_VOICE = {
    "stages": {
        "echo": {"options": {"delay_s": 0.01}, "sampling": {"max_tokens": 2}},
        "voice": {"options": {"delay_s": 0.01}},
    }
}
WORDS = "one two three four five six"


async def respond(ws) -> str:
    await send(ws, "response.create")
    done = (await events_until(ws, "response.done"))[-1]["response"]
    assert done["status"] == "completed", done["status_details"]
    return done["output"][0]["content"][0]["transcript"]


async def test_the_deployments_stage_sampling_bounds_a_response(realtime_stack):
    realtime_stack.deploy("short-voice", "echo-voice", SHORT_VOICE)
    realtime_stack.wait_running("short-voice")
    headers = {"Authorization": f"Bearer {realtime_stack.user_secret}"}
    async with connect(realtime_stack.ws_url("short-voice"), additional_headers=headers) as ws:
        await events_until(ws, "rate_limits.updated")
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": WORDS}]}
        await send(ws, "conversation.item.create", item=item)
        await events_until(ws, "conversation.item.done")
        assert await respond(ws) == "one two"

        await send(ws, "session.update", session={"max_output_tokens": 4})
        await events_until(ws, "session.updated")
        await send(ws, "conversation.item.create", item=item)
        await events_until(ws, "conversation.item.done")
        assert await respond(ws) == "one two three four"
