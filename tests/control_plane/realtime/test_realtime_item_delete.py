"""conversation.item.delete: the item is gone (conversation.item.deleted, then retrieve
fails) and the next response's prompt, as recorded in the history, no longer holds it."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from realtime_helpers import events_until, next_event, response_recorded, send
from websockets.asyncio.client import connect

from control_plane.inference.models import InferenceRequest

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def user_text(item_id: str, text: str) -> dict:
    return {"id": item_id, "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def prompt_texts(messages: list[dict]) -> list[str]:
    """The user's texts in the prompt (a text-only pipeline gets each message as plain text)."""
    return [message["content"] for message in messages if message["role"] == "user"]


async def test_a_deleted_item_leaves_the_conversation_and_the_prompt(voice_stack):
    headers = {"Authorization": f"Bearer {voice_stack.user_secret}"}
    async with connect(voice_stack.ws_url("echo-voice"), additional_headers=headers) as ws:
        await events_until(ws, "rate_limits.updated")
        for item_id, text in (
            ("item_keep_1", "kept before"),
            ("item_drop", "forget this"),
            ("item_keep_2", "kept after"),
        ):
            await send(ws, "conversation.item.create", item=user_text(item_id, text))
            await events_until(ws, "conversation.item.done")

        await send(ws, "conversation.item.delete", event_id="del", item_id="item_drop")
        deleted = await next_event(ws)
        assert deleted["type"] == "conversation.item.deleted" and deleted["item_id"] == "item_drop", deleted

        await send(ws, "conversation.item.retrieve", event_id="gone", item_id="item_drop")
        error = await next_event(ws)
        assert error["type"] == "error" and error["error"]["code"] == "item_not_found", error
        assert error["error"]["event_id"] == "gone"
        await send(ws, "conversation.item.retrieve", item_id="item_keep_1")
        assert (await next_event(ws))["item"]["id"] == "item_keep_1"

        await send(ws, "response.create")
        done = await response_recorded(ws)
        assert done["status"] == "completed"

        # a second delete of the same item is an error, and the session goes on
        await send(ws, "conversation.item.delete", event_id="again", item_id="item_drop")
        assert (await next_event(ws))["error"]["code"] == "item_not_found"

    await sync_to_async(voice_stack.history_written)()
    row = await sync_to_async(InferenceRequest.objects.get)(request_id=done["id"])
    assert prompt_texts(row.inputs["messages"]) == ["kept before", "kept after"]
