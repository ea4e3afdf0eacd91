"""Reason phrases for the status lines daphne writes. Twisted's table (`twisted.web.http.RESPONSES`)
lacks some codes the API answers with (429 reads "Unknown Status"); the standard library's
`http.HTTPStatus` names them all, and nginx's 499 is named as nginx names it."""

from __future__ import annotations

from http import HTTPStatus

EXTRA = {499: "Client Closed Request"}


def register_reason_phrases() -> None:
    try:
        from twisted.web import http
    except ImportError:  # served by another ASGI server
        return
    for status in HTTPStatus:
        http.RESPONSES.setdefault(status.value, status.phrase.encode())
    for code, phrase in EXTRA.items():
        http.RESPONSES.setdefault(code, phrase.encode())
