"""A long spoken conversation over the tiny Qwen2.5-Omni, with a context window small enough that
the conversation outgrows it after a few turns: with `truncation: "auto"` every turn gets
audio (the oldest items leave the prompt), with `truncation: "disabled"` the turn that would
overflow fails with `context_length_exceeded`."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from realtime_helpers import chunks_of, events_until, pcm16_b64, send, silence
from websockets.asyncio.client import connect

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WINDOW = 384  # tokens of thinker and talker context: a turn is about 90 of them
SMALL_WINDOW = {
    "stages": {
        "thinker": {"max_length": WINDOW, "sampling": {"max_tokens": 12}},
        "talker": {"max_length": WINDOW, "sampling": {"max_tokens": 30}},
    }
}


async def spoken_turn(ws, speech: np.ndarray) -> tuple[dict, bytes]:
    for chunk in chunks_of(np.concatenate([silence(0.3), speech, silence(1.0)])):
        await send(ws, "input_audio_buffer.append", audio=pcm16_b64(chunk))
    events = await events_until(ws, "response.done", timeout=600)
    audio = b"".join(base64.b64decode(e["delta"]) for e in events if e["type"] == "response.output_audio.delta")
    return events[-1]["response"], audio


@pytest.mark.timeout(1200)  # two long conversations on a loaded machine: what two tests had between them
async def test_auto_truncation_keeps_every_turn_spoken_and_disabled_fails_the_overflowing_one(
    realtime_stack, tiny_omni, spoken_hello
):
    """Both sessions on one deployment (each is a session of its own): the checkpoint loads once."""
    realtime_stack.deploy("omni", "qwen2_5_omni", SMALL_WINDOW, model_dir=str(tiny_omni))
    realtime_stack.wait_running("omni", timeout=600)
    await ten_spoken_turns_all_get_audio(realtime_stack, spoken_hello)
    await disabled_truncation_fails_the_overflowing_turn(realtime_stack, spoken_hello)


async def ten_spoken_turns_all_get_audio(realtime_stack, spoken_hello):
    async with connect(realtime_stack.ws_url("omni"), max_size=None,
                       additional_headers={"Authorization": f"Bearer {realtime_stack.user_secret}"}) as ws:  # fmt: skip
        created = await events_until(ws, "session.created")
        assert created[-1]["session"]["truncation"] == "auto"
        prompt_tokens = []
        for turn in range(10):
            done, audio = await spoken_turn(ws, spoken_hello)
            assert done["status"] == "completed", (turn, done["status_details"])
            assert len(audio) > 0, turn
            prompt_tokens.append(done["usage"]["input_tokens"])
    assert max(prompt_tokens) < WINDOW
    assert prompt_tokens[-1] < sum(prompt_tokens[:2]) * 2, prompt_tokens  # old turns left the prompt
    assert prompt_tokens[3] > prompt_tokens[0], prompt_tokens  # ... and were in it while they fitted


async def disabled_truncation_fails_the_overflowing_turn(realtime_stack, spoken_hello):
    async with connect(realtime_stack.ws_url("omni"), max_size=None,
                       additional_headers={"Authorization": f"Bearer {realtime_stack.user_secret}"}) as ws:  # fmt: skip
        await events_until(ws, "session.created")
        await send(ws, "session.update", session={"type": "realtime", "truncation": "disabled"})
        updated = await events_until(ws, "session.updated")
        assert updated[-1]["session"]["truncation"] == "disabled"
        statuses = []
        while len(statuses) < 10 and "failed" not in statuses:
            done, _ = await spoken_turn(ws, spoken_hello)
            statuses.append(done["status"])
    assert statuses[0] == "completed" and statuses[-1] == "failed", statuses
    assert done["status_details"]["error"]["code"] == "context_length_exceeded"
