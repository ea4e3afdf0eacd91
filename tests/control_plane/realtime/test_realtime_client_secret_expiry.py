"""A client secret used after it expired is refused at the handshake and never gets a
session: whether Redis already dropped its key (a one-second secret, waited out) or the
key is still there with a grant past its `expires_at` (a grant dated by a clock an hour
behind). A secret still valid, used last, gets the only session."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio
from asgiref.sync import sync_to_async
from realtime_helpers import next_event, refusal
from websockets.asyncio.client import connect

from control_plane.accounts.models import ApiKey, UsageRecord
from control_plane.realtime.client_secrets import client_secret_mint, client_secret_resolve, redis_key

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def browser(stack, value: str) -> dict:
    return {"subprotocols": ["realtime", f"openai-insecure-api-key.{value}"], "origin": stack.base}


async def mint(client, user, ttl_s: int, clock=time.time) -> str:
    api_key = await sync_to_async(ApiKey.objects.get)(user=user)
    secret = await client_secret_mint(
        client, user_id=user.pk, api_key_id=api_key.pk, deployment="echo-voice", session={}, ttl_s=ttl_s, clock=clock
    )
    return secret.value


async def until_dropped(client, value: str, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while await client.exists(redis_key(value)):
            await asyncio.sleep(0.2)


async def assert_refused(stack, value: str) -> None:
    event, code = await refusal(stack.ws_url("echo-voice"), **browser(stack, value))
    assert event["type"] == "error", event
    assert event["error"]["code"] == "invalid_api_key" and "expired" in event["error"]["message"], event
    assert code == 4008


async def realtime_sessions_recorded(user, at_least: int, timeout: float = 30.0) -> list[str]:
    """The request ids of the user's realtime usage rows, once there are `at_least` of them."""
    async with asyncio.timeout(timeout):
        while True:
            rows = UsageRecord.objects.filter(user=user, modality="realtime").values_list("request_id", flat=True)
            ids = await sync_to_async(list)(rows)
            if len(ids) >= at_least:
                return ids
            await asyncio.sleep(0.2)


async def test_an_expired_client_secret_gets_no_session(voice_stack, realtime_users):
    user = realtime_users["user"][0]
    client = redis.asyncio.Redis.from_url(voice_stack.redis.url)
    try:
        short = await mint(client, user, ttl_s=1)
        await until_dropped(client, short)
        await assert_refused(voice_stack, short)

        stale = await mint(client, user, ttl_s=600, clock=lambda: time.time() - 3600)
        assert await client.exists(redis_key(stale))  # Redis still holds it: the grant's own expiry must refuse it
        assert await client_secret_resolve(client, stale) is None
        await assert_refused(voice_stack, stale)

        valid = await mint(client, user, ttl_s=600)
    finally:
        await client.aclose()
    async with connect(voice_stack.ws_base + "/v1/realtime", **browser(voice_stack, valid)) as ws:
        created = await next_event(ws)
        assert created["type"] == "session.created", created

    # a session records its minutes when it closes: only the valid secret's session ever existed
    recorded = await realtime_sessions_recorded(user, at_least=1)
    assert recorded == [created["session"]["id"]]
