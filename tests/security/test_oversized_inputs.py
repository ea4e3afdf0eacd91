"""Oversized bodies and prompts are refused at the API edge, before a replica sees them:
a per-route byte limit answered from the Content-Length (or from the bytes counted, when the
body is chunked) and a bound on a prompt's characters derived from the model's context."""

from __future__ import annotations

import time

import httpx
import pytest
from openai_shape import assert_openai_error

from control_plane.system.body_limits import MIB

pytestmark = [pytest.mark.slow]


def chunked(total: int, piece: int = 256 * 1024):
    sent = 0
    while sent < total:
        yield b" " * min(piece, total - sent)
        sent += piece


def test_bodies_over_a_routes_limit_are_refused_before_they_are_read(echo_stack):
    # /v1/completions takes 2 MiB of text; a 3 MiB body is refused from its Content-Length
    body = b'{"model":"echo","prompt":"' + b"a" * (3 * MIB) + b'"}'
    response = echo_stack.http("POST", "/v1/completions", content=body, headers={"Content-Type": "application/json"})
    error = assert_openai_error(response, 413)
    assert error["code"] == "request_too_large" and str(2 * MIB) in error["message"]

    # the same without a Content-Length (chunked): counted as it arrives
    response = echo_stack.http(
        "POST", "/v1/completions", content=chunked(3 * MIB), headers={"Content-Type": "application/json"}
    )
    assert_openai_error(response, 413)

    # /api/ takes 1 MiB
    response = echo_stack.http("POST", "/api/keys/", content=b"{" + b" " * (2 * MIB) + b"}",
                               headers={"Content-Type": "application/json"})  # fmt: skip
    assert_openai_error(response, 413)

    # a body under the limit still works
    ok = echo_stack.http("POST", "/v1/completions", json={"model": "echo", "prompt": "hi", "max_tokens": 2})
    assert ok.status_code == 200, ok.text


def test_a_prompt_longer_than_the_context_is_refused_in_the_web_tier(echo_stack):
    """A 12 MB prompt under the chat route's byte limit: refused fast, and small chats on the
    same replica are not held up by it."""
    prompt = "word " * (12 * 1000 * 1000 // 5)
    started = time.perf_counter()
    response = echo_stack.http(
        "POST", "/v1/chat/completions", json={"model": "echo", "messages": [{"role": "user", "content": prompt}]}
    )
    refused_in = time.perf_counter() - started
    print(f"a 12 MB prompt refused in {refused_in:.3f} s")
    error = assert_openai_error(response, 400)
    assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
    assert refused_in < 5.0, refused_in  # sending 12 MB over loopback included; the replica never tokenizes it

    # the same through the content-part form and the completions route's prompt
    parts = [{"type": "text", "text": "x" * 20_000}, {"type": "text", "text": "y" * 20_000}]
    response = echo_stack.http(
        "POST", "/v1/chat/completions", json={"model": "echo", "messages": [{"role": "user", "content": parts}]}
    )
    assert assert_openai_error(response, 400)["code"] == "context_length_exceeded"
    response = echo_stack.http("POST", "/v1/completions", json={"model": "echo", "prompt": "z" * 40_000})
    assert assert_openai_error(response, 400)["code"] == "context_length_exceeded"

    # a prompt under the bound is served
    started = time.perf_counter()
    small = echo_stack.client().chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "hello there"}], max_tokens=4
    )
    assert small.choices[0].message.content and time.perf_counter() - started < 10
    assert httpx.get(f"{echo_stack.base}/health").status_code == 200
