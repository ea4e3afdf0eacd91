"""A realtime session's credential, checked for as long as the session lasts.

A session is authenticated once, at the handshake, but may last an hour. So its key (or, for
a console session, its user) is checked again from the database: at once when the key or the
user changes anywhere (the cache-invalidation channel's "key" and "user" topics, which the
services publish on revoke, expiry edits and deactivation), before each response, and every
`OMNISTAGE_REALTIME_KEY_CHECK_S` seconds (default 5) in case a message was lost or the key
simply expired. When the key is revoked or expired, its scope or allow-list no longer covers
the deployment, or the user is deactivated, the session ends with an `error` event.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable

from django.conf import settings
from django.contrib.auth import get_user_model

from control_plane import invalidation
from control_plane.accounts.key_cache import KEY, USER
from control_plane.accounts.models import ApiKey
from control_plane.accounts.permissions import AccessDenied, check_access
from control_plane.orm_threads import orm_in_thread


def check_interval_s() -> float:
    return float(getattr(settings, "REALTIME_KEY_CHECK_S", 5.0))


class KeyWatch:
    def __init__(self, principal, deployment: str, on_invalid: Callable[[str], Awaitable[None]]):
        self.principal = principal
        self.deployment = deployment
        self.on_invalid = on_invalid
        self.loop = asyncio.get_running_loop()
        self.wake = asyncio.Event()
        _watches.add(self)

    def concerns(self, topic: str, value: str) -> bool:
        if value == invalidation.EVERYTHING:
            return True
        key = self.principal.api_key
        if topic == KEY:
            return key is not None and key.prefix == value
        return str(self.principal.user.pk) == value

    def poke(self) -> None:
        """Thread-safe: the invalidation listener calls it from its own thread."""
        try:
            self.loop.call_soon_threadsafe(self.wake.set)
        except RuntimeError:  # the session's loop has closed
            _watches.discard(self)

    async def run(self) -> None:
        """Until the credential is no longer valid (then `on_invalid(reason)`), or cancelled."""
        try:
            while True:
                try:
                    await asyncio.wait_for(self.wake.wait(), timeout=check_interval_s())
                except TimeoutError:
                    pass
                self.wake.clear()
                if not await self.still_valid():
                    return
        finally:
            _watches.discard(self)

    async def still_valid(self) -> bool:
        reason = await orm_in_thread(invalid_reason)(self.principal, self.deployment)
        if reason is None:
            return True
        await self.on_invalid(reason)
        return False


def invalid_reason(principal, deployment: str) -> str | None:
    """Why the session's credential no longer holds, read from the database; None if it does."""
    user = get_user_model().objects.filter(pk=principal.user.pk).first()
    if user is None or not user.is_active:
        return "The user account of this session was deactivated."
    api_key = None
    if principal.api_key is not None:
        api_key = ApiKey.objects.filter(pk=principal.api_key.pk).first()
        if api_key is None or api_key.revoked_at is not None:
            return "The API key of this session was revoked."
        if not api_key.is_active:
            return "The API key of this session expired."
    try:
        check_access(user, api_key, "inference", deployment)
    except AccessDenied as denied:
        return denied.message
    return None


_watches: weakref.WeakSet[KeyWatch] = weakref.WeakSet()


def _notify(topic: str):
    def callback(value: str) -> None:
        for watch in list(_watches):
            if watch.concerns(topic, value):
                watch.poke()

    return callback


invalidation.register(KEY, _notify(KEY))
invalidation.register(USER, _notify(USER))
