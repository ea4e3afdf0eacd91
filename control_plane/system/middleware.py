"""Django's middleware, with its hooks run in the event loop instead of a thread.

Under ASGI, Django runs each hook of a `MiddlewareMixin` middleware (process_request,
process_view, process_response) through `sync_to_async(thread_sensitive=True)`: seven
middleware made fourteen thread hops per request and the first one started a thread, which
was most of the web process's CPU under load (docs/web-tier.md). Their hooks do no I/O in
the common case, so these subclasses call them inline; the two that may touch the database
(saving a modified session, storing messages into the session) still run in a thread when,
and only when, they have something to write.

Each class here is Django's own middleware of the same name; `settings.MIDDLEWARE` lists them.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import middleware as auth
from django.contrib.messages import middleware as messages
from django.contrib.messages.storage import default_storage
from django.contrib.sessions import middleware as sessions
from django.middleware import clickjacking, common, csrf, security
from django.utils.functional import SimpleLazyObject, empty


class InlineHooks:
    """Mixed in before a MiddlewareMixin subclass: its async path calls the hooks inline."""

    def __init__(self, get_response):
        super().__init__(get_response)
        if self.async_mode and hasattr(self, "process_view"):
            # the handler wraps a sync process_view in a thread; an async one it awaits as is
            self.process_view = self._process_view_inline

    async def __acall__(self, request):
        response = None
        if hasattr(self, "process_request"):
            response = self.process_request(request)
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            if self.writes_on_response(request):
                return await sync_to_async(self.process_response)(request, response)
            response = self.process_response(request, response)
        return response

    def writes_on_response(self, request) -> bool:
        """Whether process_response may reach the database for this request."""
        return False

    async def _process_view_inline(self, request, view_func, view_args, view_kwargs):
        return type(self).process_view(self, request, view_func, view_args, view_kwargs)


class SecurityMiddleware(InlineHooks, security.SecurityMiddleware):
    pass


class SessionMiddleware(InlineHooks, sessions.SessionMiddleware):
    def writes_on_response(self, request) -> bool:
        session = getattr(request, "session", None)
        return session is not None and (session.modified or settings.SESSION_SAVE_EVERY_REQUEST)


class CommonMiddleware(InlineHooks, common.CommonMiddleware):
    pass


class CsrfViewMiddleware(InlineHooks, csrf.CsrfViewMiddleware):
    pass


class AuthenticationMiddleware(InlineHooks, auth.AuthenticationMiddleware):
    pass


class MessageMiddleware(InlineHooks, messages.MessageMiddleware):
    """Its storage is built on first use: API requests never touch messages, and building the
    storage (a cookie signer from the settings) was a tenth of an API request's CPU."""

    def process_request(self, request):
        request._messages = SimpleLazyObject(lambda: default_storage(request))

    def process_response(self, request, response):
        if _untouched(getattr(request, "_messages", None)):
            return response
        return super().process_response(request, response)

    def writes_on_response(self, request) -> bool:
        storage = getattr(request, "_messages", None)
        return not _untouched(storage) and (storage.used or storage.added_new)


def _untouched(storage) -> bool:
    """No storage, or a lazy one nothing has used."""
    return storage is None or (isinstance(storage, SimpleLazyObject) and storage._wrapped is empty)


class XFrameOptionsMiddleware(InlineHooks, clickjacking.XFrameOptionsMiddleware):
    pass
