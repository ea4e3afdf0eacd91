"""Who may open a session: API keys, short-lived client secrets (the browser's subprotocol
form), the origin check; quotas: concurrent sessions, realtime minutes, rate_limits.updated."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from realtime_helpers import events_until, next_event, refusal
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from control_plane.accounts.models import Quota, UsageRecord

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


async def test_keys_client_secrets_origins_and_session_quotas(voice_stack, realtime_users):
    stack = voice_stack
    user = realtime_users["user"][0]
    await sync_to_async(Quota.objects.create)(user=user, metric="concurrent_requests", window="none", limit=1)
    await sync_to_async(Quota.objects.create)(user=user, metric="realtime_minutes", window="day", limit=30)
    url = stack.ws_url("echo-voice")
    key = {"Authorization": f"Bearer {stack.user_secret}"}

    event, code = await refusal(url)
    assert event["error"]["code"] == "invalid_api_key" and code == 4008
    event, _ = await refusal(url, additional_headers={"Authorization": "Bearer omni-nope-nope"})
    assert event["error"]["code"] == "invalid_api_key"
    event, _ = await refusal(stack.ws_url("no-such-model"), additional_headers=key)
    assert event["error"]["code"] == "model_not_found"

    # a client secret, minted with the key, for one deployment and a starting configuration
    body = {
        "expires_after": {"anchor": "created_at", "seconds": 60},
        "session": {"type": "realtime", "model": "echo-voice", "audio": {"output": {"format": {"type": "audio/pcma"}}}},
    }
    minted = stack.http("POST", "/v1/realtime/client_secrets", json=body)
    assert minted.status_code == 200, minted.text
    secret = minted.json()
    assert secret["value"].startswith("ek_") and secret["session"]["audio"]["output"]["format"]["type"] == "audio/pcma"
    bad = stack.http("POST", "/v1/realtime/client_secrets", json={"session": {"type": "realtime"}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "session.model"
    bad = stack.http("POST", "/v1/realtime/client_secrets", json={**body, "expires_after": {"seconds": 99999}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "expires_after.seconds"
    assert stack.http("POST", "/v1/realtime/client_secrets", secret="omni-x-y", json=body).status_code == 401

    browser = {
        "subprotocols": ["realtime", f"openai-insecure-api-key.{secret['value']}"],
        "origin": stack.base,
    }
    async with connect(stack.ws_base + "/v1/realtime", **browser) as ws:
        assert ws.subprotocol == "realtime"
        created = await next_event(ws)
        assert created["type"] == "session.created"
        assert created["session"]["model"] == "echo-voice"
        assert created["session"]["audio"]["output"]["format"] == {"type": "audio/pcma"}
        limits = (await events_until(ws, "rate_limits.updated"))[-1]["rate_limits"]
        minutes = next(entry for entry in limits if entry["name"] == "realtime_minutes")
        assert minutes["limit"] == 30 and minutes["remaining"] <= 29
        session_id = created["session"]["id"]

        # the one concurrency slot is this session's
        event, code = await refusal(url, additional_headers=key)
        assert event["error"]["code"] == "rate_limit_exceeded" and code == 4008
        # the secret is for echo-voice only
        event, _ = await refusal(stack.ws_url("other"), **browser)
        assert event["error"]["code"] == "model_mismatch"
        # another site's page may not open a session, even with a secret
        with pytest.raises(InvalidStatus):
            async with connect(url, subprotocols=browser["subprotocols"], origin="http://evil.example"):
                pass

    async def session_recorded():
        for _ in range(300):
            record = await sync_to_async(UsageRecord.objects.filter(request_id=session_id).first)()
            if record is not None:
                return record
            await asyncio.sleep(0.1)
        raise AssertionError("the session's usage was not recorded")

    record = await session_recorded()
    assert record.modality == "realtime" and 0 < record.realtime_minutes < 1
    async with connect(url, additional_headers=key) as ws:  # the slot is free again
        assert (await next_event(ws))["type"] == "session.created"
