"""A realtime session does not outlive its credential: revoking its key ends it at once (the
invalidation message), and a key that expired or a user deactivated behind the services'
back ends it before the next response; each time with an `error` event and close code 4008."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.utils import timezone
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from control_plane.accounts.models import ApiKey
from control_plane.accounts.services import api_key_create

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
USER_MESSAGE = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}


@pytest.fixture
def platform_env(platform_env):
    # the periodic re-check far away: what ends these sessions is the invalidation or the
    # check before a response
    return {**platform_env, "OMNISTAGE_REALTIME_KEY_CHECK_S": "120"}


async def next_event(ws, timeout: float = 30.0) -> dict:
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


async def closing_error(ws, timeout: float = 30.0) -> tuple[dict, int, float]:
    """The error event that ends the session, its close code, and when it came."""
    error = None
    async with asyncio.timeout(timeout):
        try:
            while True:
                event = json.loads(await ws.recv())
                if event["type"] == "error":
                    error, at = event, time.perf_counter()
        except ConnectionClosed as closed:
            assert error is not None, "closed without an error event"
            return error, closed.rcvd.code, at


async def hostile_events_get_error_events(ws) -> None:
    """Values no client event may hold are answered with an error event; the session goes on."""
    hostile = {
        '{"type": "session.update", "session": {"instructions": "\\ud800"}}': "invalid_value",
        '{"type": "session.update", "session": {"max_output_tokens": ' + str(2**80) + "}}": "invalid_value",
        '{"type": "session.update", "session": {"temperature": NaN}}': "invalid_value",
        "[" * 100_000 + "]" * 100_000: "invalid_json",
    }
    for text, code in hostile.items():
        await ws.send(text)
        event = await next_event(ws)
        while event["type"] != "error":
            event = await next_event(ws)
        assert event["error"]["code"] == code, (text[:80], event)


async def opened(ws) -> None:
    assert (await next_event(ws))["type"] == "session.created"


def new_key(user_name: str, scopes: list[str]) -> str:
    user = get_user_model().objects.create_user(user_name, password="x")
    return api_key_create(user=user, name="rt", scopes=scopes)[1]


async def test_a_revoked_key_ends_its_session_at_once(voice_stack):
    secret = await sync_to_async(new_key)("revoked-user", ["inference", "keys"])
    key = await sync_to_async(ApiKey.objects.get)(user__username="revoked-user")
    headers = {"Authorization": f"Bearer {secret}"}
    async with connect(voice_stack.ws_url("echo-voice"), additional_headers=headers) as ws:
        await opened(ws)
        await hostile_events_get_error_events(ws)
        revoked = await asyncio.to_thread(voice_stack.http, "POST", f"/api/keys/{key.pk}/revoke/", secret=secret)
        assert revoked.status_code == 200, revoked.text
        revoked_at = time.perf_counter()
        error, code, at = await closing_error(ws, timeout=10)
    assert error["error"]["code"] == "invalid_api_key" and "revoked" in error["error"]["message"]
    assert code == 4008
    assert at - revoked_at < 3.0, at - revoked_at  # the invalidation, not the 120 s re-check


@pytest.mark.parametrize("change", ["expire the key", "deactivate the user"])
async def test_a_session_whose_credential_lapsed_gets_no_further_response(voice_stack, change):
    name = f"lapsed-{change.split()[0]}"
    secret = await sync_to_async(new_key)(name, ["inference"])
    async with connect(
        voice_stack.ws_url("echo-voice"), additional_headers={"Authorization": f"Bearer {secret}"}
    ) as ws:
        await opened(ws)
        await ws.send(json.dumps({"type": "conversation.item.create", "item": USER_MESSAGE}))
        # behind the services' back: no invalidation message reaches the server
        if change == "expire the key":
            past = timezone.now() - timedelta(seconds=1)
            await sync_to_async(ApiKey.objects.filter(user__username=name).update)(expires_at=past)
        else:
            await sync_to_async(get_user_model().objects.filter(username=name).update)(is_active=False)
        await ws.send(json.dumps({"type": "response.create"}))
        error, code, _ = await closing_error(ws)
    expected = "expired" if change == "expire the key" else "deactivated"
    assert error["error"]["code"] == "invalid_api_key" and expected in error["error"]["message"], error
    assert code == 4008
