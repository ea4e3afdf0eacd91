"""The message middleware builds its storage only for a request that uses messages, and a
message added on one request is still shown on the next."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.messages import get_messages
from django.http import HttpResponse
from django.test import RequestFactory
from django.utils.functional import empty

from control_plane.system.middleware import MessageMiddleware, SessionMiddleware


def through_middleware(view, cookies: dict[str, str] | None = None):
    request = RequestFactory().get("/somewhere")
    request.COOKIES.update(cookies or {})
    handler = SessionMiddleware(MessageMiddleware(view))
    return request, handler(request)


def test_a_request_that_never_uses_messages_never_builds_their_storage():
    request, response = through_middleware(lambda request: HttpResponse("ok"))
    assert request._messages._wrapped is empty
    assert "messages" not in response.cookies


def test_a_message_added_on_one_request_is_shown_on_the_next():
    def adds(request):
        messages.success(request, "Stopping echo.")
        return HttpResponse("ok")

    _, response = through_middleware(adds)
    assert "messages" in response.cookies
    shown = []

    def reads(request):
        shown.extend(str(message) for message in get_messages(request))
        return HttpResponse("ok")

    _, after = through_middleware(reads, cookies={"messages": response.cookies["messages"].value})
    assert shown == ["Stopping echo."]
    assert after.cookies["messages"].value == ""  # read once, then cleared
