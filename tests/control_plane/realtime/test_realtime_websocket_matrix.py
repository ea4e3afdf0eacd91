"""Access matrix over every WebSocket route, on the live server: /v1/realtime and the
console's playground socket.

/v1/realtime always accepts the handshake and refuses in the protocol: one `error` event
naming why, then close code 4008, and never a `session.created`. The console's socket is
for signed-in browsers only: it refuses at the handshake (daphne answers HTTP 403), whatever
key or client secret comes with it. The same credentials that work are tried first, so a
refusal is about who asks. (The matrix lives with the realtime tests for their live stack.)
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from django.utils import timezone
from realtime_helpers import next_event
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from control_plane.accounts.models import ApiKey
from control_plane.accounts.services import api_key_create, api_key_revoke
from control_plane.realtime.auth import SUBPROTOCOL_KEY_PREFIX
from control_plane.realtime.client_secrets import MIN_TTL_S
from control_plane.realtime.routing import REALTIME_PATH
from control_plane.websocket_urls import websocket_urlpatterns

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CONSOLE_PATH = "/ws/console/playground/"
CONSOLE_MODELS_PATH = "/ws/console/models/"
POLICY_VIOLATION = 4008
TEXT_OPTIONS = {"stages": {"echo": {"options": {"delay_s": 0.01}}}}


def test_the_matrix_covers_every_websocket_route():
    routes = {"/" + str(pattern.pattern) for pattern in websocket_urlpatterns} | {REALTIME_PATH}
    assert routes == {REALTIME_PATH, CONSOLE_PATH, CONSOLE_MODELS_PATH}, (
        f"add the new WebSocket routes to this matrix: {routes}"
    )


def bearer(secret: str) -> dict:
    return {"additional_headers": {"Authorization": f"Bearer {secret}"}}


def browser(secret: str, origin: str) -> dict:
    """How a browser sends a client secret: as a subprotocol, with its page's Origin."""
    return {"subprotocols": ["realtime", SUBPROTOCOL_KEY_PREFIX + secret], "origin": origin}


async def realtime_refusal(url: str, **kwargs) -> dict:
    """The error of a refused session: the only event before the 4008 close."""
    events = []
    async with connect(url, **kwargs) as ws:
        with pytest.raises(ConnectionClosed) as closed:
            async with asyncio.timeout(30):
                while True:
                    events.append(json.loads(await ws.recv()))
    assert [event["type"] for event in events] == ["error"], events
    assert closed.value.rcvd is not None and closed.value.rcvd.code == POLICY_VIOLATION
    return events[0]["error"]


async def realtime_session(url: str, **kwargs) -> None:
    async with connect(url, **kwargs) as ws:
        created = await next_event(ws)
        assert created["type"] == "session.created", created


async def console_refusal(url: str, **kwargs) -> int:
    with pytest.raises(InvalidStatus) as refused:
        async with connect(url, **kwargs):
            pass
    return refused.value.response.status_code


def principals(user) -> dict[str, str]:
    """The user's keys that must not open a session: revoked, expired, unscoped, elsewhere."""
    revoked, revoked_secret = api_key_create(user=user, name="revoked", scopes=["inference"])
    api_key_revoke(key=revoked)
    expired, expired_secret = api_key_create(user=user, name="expired", scopes=["inference"])
    ApiKey.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    _, unscoped = api_key_create(user=user, name="unscoped", scopes=["deployments:read", "keys"])
    _, elsewhere = api_key_create(user=user, name="elsewhere", scopes=["inference"], allowed_deployments=["echo"])
    return {"revoked": revoked_secret, "expired": expired_secret, "unscoped": unscoped, "elsewhere": elsewhere}


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


def mint(stack, secret: str, model: str, seconds: int = 600) -> dict:
    body = {
        "expires_after": {"anchor": "created_at", "seconds": seconds},
        "session": {"type": "realtime", "model": model},
    }
    response = stack.http("POST", "/v1/realtime/client_secrets", secret=secret, json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def test_websocket_routes_refuse_everyone_without_access(voice_stack, realtime_users):
    stack = voice_stack
    stack.deploy("echo", "echo", TEXT_OPTIONS)
    await sync_to_async(stack.wait_running)("echo")
    user = realtime_users["user"][0]
    keys = await sync_to_async(principals)(user)
    short_lived = await sync_to_async(mint)(stack, stack.user_secret, "echo-voice", seconds=MIN_TTL_S)
    await realtime_matrix(stack, user, keys)
    await console_matrix(stack, user, keys, short_lived["value"])

    await asyncio.sleep(max(0.0, short_lived["expires_at"] - time.time()) + 1)
    error = await realtime_refusal(stack.ws_base + REALTIME_PATH, **browser(short_lived["value"], stack.base))
    assert error["code"] == "invalid_api_key", "an expired client secret"


async def realtime_matrix(stack, user, keys: dict[str, str]) -> None:
    url = stack.ws_url("echo-voice")
    await realtime_session(url, **bearer(stack.user_secret))
    refusals = {
        "anonymous": ({}, "invalid_api_key"),
        "unknown key": (bearer("omni-nope-nope"), "invalid_api_key"),
        "revoked key": (bearer(keys["revoked"]), "invalid_api_key"),
        "expired key": (bearer(keys["expired"]), "invalid_api_key"),
        "key without the inference scope": (bearer(keys["unscoped"]), "insufficient_permissions"),
        "key outside its allow-list": (bearer(keys["elsewhere"]), "model_not_found"),  # hidden, as in /v1/models
    }
    for who, (credentials, code) in refusals.items():
        error = await realtime_refusal(url, **credentials)
        assert error["code"] == code, f"{who}: {error}"

    for_voice = await sync_to_async(mint)(stack, stack.user_secret, "echo-voice")
    await realtime_session(stack.ws_base + REALTIME_PATH, **browser(for_voice["value"], stack.base))
    for_echo = await sync_to_async(mint)(stack, stack.user_secret, "echo")
    error = await realtime_refusal(url, **browser(for_echo["value"], stack.base))
    assert error["code"] == "model_mismatch", "a client secret for another deployment"
    assert (await realtime_refusal(url, **bearer(for_echo["value"])))["code"] == "model_mismatch"
    error = await realtime_refusal(url, **browser("ek_" + "x" * 43, stack.base))
    assert error["code"] == "invalid_api_key", "an unknown client secret"

    # a client secret dies with the key that minted it
    minter, minter_secret = await sync_to_async(api_key_create)(user=user, name="minter", scopes=["inference"])
    orphan = await sync_to_async(mint)(stack, minter_secret, "echo-voice")
    await sync_to_async(api_key_revoke)(key=minter)
    error = await realtime_refusal(stack.ws_base + REALTIME_PATH, **browser(orphan["value"], stack.base))
    assert error["code"] == "invalid_api_key", "a client secret whose key was revoked"


async def console_matrix(stack, user, keys: dict[str, str], client_secret: str) -> None:
    page = {"origin": stack.base}
    cookie = await sync_to_async(session_cookie)(user)
    async with connect(stack.ws_base + CONSOLE_PATH, additional_headers={"Cookie": cookie}, **page) as ws:
        await ws.send(json.dumps({"type": "run", "ref": "r1", "mode": "chat", "deployment": "nope", "input": {}}))
        assert json.loads(await asyncio.wait_for(ws.recv(), 30))["ref"] == "r1"  # a signed-in browser
    async with connect(stack.ws_base + CONSOLE_MODELS_PATH, additional_headers={"Cookie": cookie}, **page) as ws:
        await asyncio.wait_for(await ws.ping(), 30)  # open for a signed-in browser
    for path in (CONSOLE_PATH, CONSOLE_MODELS_PATH):
        await console_refusals(stack, user, stack.ws_base + path, cookie, keys, client_secret)


async def console_refusals(stack, user, url: str, cookie: str, keys: dict[str, str], client_secret: str) -> None:
    page = {"origin": stack.base}
    refusals = {
        "anonymous": {},
        "the user's valid key": {"Authorization": f"Bearer {stack.user_secret}"},
        **{f"{name} key": {"Authorization": f"Bearer {secret}"} for name, secret in keys.items()},
    }
    for who, headers in refusals.items():
        assert await console_refusal(url, additional_headers=headers, **page) == 403, who
    subprotocol = {"subprotocols": ["realtime", SUBPROTOCOL_KEY_PREFIX + client_secret]}
    assert await console_refusal(url, **subprotocol, **page) == 403, "a client secret"
    assert await console_refusal(url, additional_headers={"Cookie": "sessionid=forged"}, **page) == 403, "forged"
    other_site = {"origin": "http://evil.example"}
    assert await console_refusal(url, additional_headers={"Cookie": cookie}, **other_site) == 403, "another site"

    await sync_to_async(set_active)(user, False)
    try:
        assert await console_refusal(url, additional_headers={"Cookie": cookie}, **page) == 403, "a deactivated user"
    finally:
        await sync_to_async(set_active)(user, True)


def set_active(user, active: bool) -> None:
    type(user).objects.filter(pk=user.pk).update(is_active=active)
