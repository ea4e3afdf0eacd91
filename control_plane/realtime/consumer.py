"""`GET /v1/realtime?model=<deployment>`: the OpenAI Realtime protocol over a WebSocket.

The handshake is always accepted, so that a refusal (bad key, unknown model, quota) reaches
the client as an `error` event before the socket closes with code 4008. An accepted
session holds one concurrency slot and counts its minutes (session_quota.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from control_plane.accounts.permissions import AccessDenied
from control_plane.accounts.quota import QuotaExceeded, QuotaUnavailable
from control_plane.inference.errors import ApiError
from control_plane.inference.targets import Caller, served_deployment
from control_plane.realtime.auth import authenticate
from control_plane.realtime.events import ProtocolError, error_event, server_event
from control_plane.realtime.key_watch import KeyWatch
from control_plane.realtime.session import RealtimeSession
from control_plane.realtime.session_quota import SessionQuota, session_close
from control_plane.redis_client import get_async_redis

log = logging.getLogger(__name__)
POLICY_VIOLATION = 4008  # 1008 in the 4000 range: daphne (autobahn) sends only 1000 and 3000-4999


def max_session_s() -> float:
    return float(getattr(settings, "REALTIME_MAX_SESSION_S", 3600))


def quota_check_s() -> float:
    return float(getattr(settings, "REALTIME_QUOTA_CHECK_S", 15))


class Refused(Exception):
    def __init__(self, message: str, code: str, type: str = "invalid_request_error"):
        super().__init__(message)
        self.message, self.code, self.type = message, code, type


class RealtimeConsumer(AsyncWebsocketConsumer):
    # An alias that is never configured: this consumer takes no channel-layer messages (its
    # outputs come through serve()), and so holds no blocking channel-layer read either.
    channel_layer_alias = "realtime-needs-no-channel-layer"
    session: RealtimeSession | None = None
    ticker: asyncio.Task | None = None
    key_watch: asyncio.Task | None = None
    redis = None
    closed = False

    async def connect(self):
        offered = self.scope.get("subprotocols") or []
        chosen = "realtime" if "realtime" in offered else next(iter(offered), None)
        await self.accept(subprotocol=chosen)
        self.redis = get_async_redis()
        try:
            await self._open_session()
        except Refused as refused:
            await self._refuse(refused.message, refused.code, refused.type)
        except Exception as crash:  # noqa: BLE001 - tell the client, then hang up
            log.exception("realtime session failed to open")
            await self._refuse(f"The session could not start: {type(crash).__name__}", "internal_error", "server_error")

    async def _open_session(self) -> None:
        try:
            principal = await authenticate(self.scope, self.redis)
        except AccessDenied as denied:
            raise Refused(denied.message, denied.code) from None
        model = self._model(principal)
        try:
            served = await served_deployment(Caller(principal.user, principal.api_key), model)
        except ApiError as error:
            raise Refused(error.message, error.code or "model_not_found", error.type) from None
        except AccessDenied as denied:
            raise Refused(denied.message, denied.code) from None
        quota = SessionQuota(principal.user, principal.api_key)
        try:
            await sync_to_async(quota.admit)()
        except QuotaExceeded as exceeded:
            raise Refused(exceeded.message, "rate_limit_exceeded", "rate_limit_error") from None
        except QuotaUnavailable:
            raise Refused("Quota service temporarily unavailable; please retry.", "service_unavailable",
                          "server_error") from None  # fmt: skip
        self.session = RealtimeSession(
            principal=principal,
            deployment=served.deployment,
            pipeline=served.pipeline,
            redis=self.redis,
            quota=quota,
            send=self.send_event,
            max_session_s=max_session_s(),
        )
        self.session.after_response = self.send_rate_limits
        watch = KeyWatch(principal, served.deployment.name, self._credential_lost)
        self.session.may_respond = watch.still_valid
        try:
            await self.session.open(principal.grant.session if principal.grant else None)
        except ProtocolError as error:
            raise Refused(f"The client secret's session is invalid: {error.message}", error.code) from None
        await self.send_rate_limits()
        self.ticker = asyncio.create_task(self._tick())
        self.key_watch = asyncio.create_task(watch.run())

    def _model(self, principal) -> str:
        query = parse_qs(self.scope.get("query_string", b"").decode("latin1"))
        model = (query.get("model") or [None])[0]
        if principal.grant is not None:
            if model and model != principal.grant.deployment:
                raise Refused(f"This client secret is for model '{principal.grant.deployment}', not '{model}'.",
                              "model_mismatch")  # fmt: skip
            return principal.grant.deployment
        if not model:
            raise Refused("Missing required query parameter 'model' (the deployment's name).", "missing_model")
        return model

    async def _credential_lost(self, reason: str) -> None:
        await self._refuse(reason, "invalid_api_key")

    async def _refuse(self, message: str, code: str, type: str = "invalid_request_error") -> None:
        await self.send_event(error_event(message, code=code, type=type))
        await self.close(code=POLICY_VIOLATION)
        self.closed = True

    # ------------------------------------------------------------------ frames

    async def receive(self, text_data=None, bytes_data=None):
        if self.session is None:
            return
        if text_data is None:
            await self.send_event(error_event("Binary frames are not part of the protocol; send JSON text frames.",
                                              code="invalid_event"))  # fmt: skip
            return
        await self.session.handle(text_data)

    async def send_event(self, event: dict) -> None:
        if self.closed:
            return
        try:
            await self.send(text_data=json.dumps(event))
        except Exception:  # the peer went away mid-send
            self.closed = True

    async def send_rate_limits(self) -> None:
        if self.session is None:
            return
        try:
            limits = await sync_to_async(self.session.quota.rate_limits)()
        except Exception:  # noqa: BLE001 - the quota store being down must not end the session
            log.warning("could not read rate limits", exc_info=True)
            return
        await self.send_event(server_event("rate_limits.updated", rate_limits=limits))

    async def _tick(self) -> None:
        while not self.closed:
            await asyncio.sleep(quota_check_s())
            session = self.session
            if time.time() >= session.config.expires_at:
                await self._refuse("Your session hit the maximum duration.", "session_expired")
                return
            try:
                exhausted = await sync_to_async(session.quota.exhausted)()
            except Exception:  # noqa: BLE001
                log.warning("could not check the realtime quota", exc_info=True)
                continue
            if exhausted:
                await self._refuse("Your realtime minutes quota is used up.", "rate_limit_exceeded", "rate_limit_error")
                return

    async def disconnect(self, code):
        self.closed = True
        for task in (self.ticker, self.key_watch):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        session = self.session
        if session is not None:
            await session.close()
            await session_close(self.redis, principal=session.principal, session_id=session.config.id,
                                deployment=session.deployment.name, quota=session.quota)  # fmt: skip
        if self.redis is not None:
            await self.redis.aclose()
