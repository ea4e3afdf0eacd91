"""Daphne without Twisted's own form parsing.

Twisted's `http.Request` parses every multipart POST body itself before daphne hands the
request to the ASGI application, and answers a body it cannot parse (a multipart request
without a boundary, say) with a bare `400 Bad Request` of no body, so the client never gets
OpenAI's error shape. Daphne ignores what Twisted parsed (Django parses the body again), so
switching that parsing off only removes a second parse of every upload and lets the
application answer malformed bodies (openai_compat/bodies.py).
"""

from __future__ import annotations


def skip_twisted_form_parsing() -> None:
    try:
        from daphne.http_protocol import WebRequest
    except ImportError:  # served by another ASGI server
        return
    if getattr(WebRequest, "_omnistage_no_form_parsing", False):
        return
    parsing_init = WebRequest.__init__

    def init(self, *args, **kwargs):
        parsing_init(self, *args, **kwargs)
        self._parsePOSTFormSubmission = False  # Twisted sets it per request, from a constructor argument

    WebRequest.__init__ = init
    WebRequest._omnistage_no_form_parsing = True
