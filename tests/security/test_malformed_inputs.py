"""Every /v1 and /api route against hand-made hostile inputs (hostile_inputs.py) on the live
server: no input gives a server error, and /v1 refusals come in OpenAI's error shape, naming
the field where there is one."""

from __future__ import annotations

import json

import pytest
from hostile_inputs import HUGE, all_cases
from openai_shape import assert_openai_error

pytestmark = [pytest.mark.slow]


def as_ascii_json(kwargs: dict) -> dict:
    """httpx encodes `json=` as UTF-8, which a lone surrogate cannot be: send it \\u-escaped."""
    if "json" not in kwargs:
        return kwargs
    return {"content": json.dumps(kwargs["json"]), "headers": {"Content-Type": "application/json"}}


def test_no_hostile_input_gives_a_server_error(echo_stack):
    cases = all_cases()
    assert len(cases) >= 100
    failures = []
    for label, method, path, kwargs in cases:
        secret = echo_stack.operator_secret if path.startswith("/api/") else None
        response = echo_stack.http(method, path, secret=secret, **as_ascii_json(kwargs))
        if response.status_code >= 500:
            failures.append(f"{label}: {response.status_code} {response.text[:200]}")
        elif path.startswith("/v1/") and response.status_code >= 400:
            try:
                assert_openai_error(response, response.status_code, label)
            except (AssertionError, ValueError, KeyError) as error:
                failures.append(f"{label}: not OpenAI's error shape: {error} {response.text[:200]}")
    assert not failures, "\n".join(failures)
    assert "Traceback" not in echo_stack.logs(), echo_stack.logs()[-3000:]


def test_the_three_former_server_errors_are_400s_naming_the_field(echo_stack):
    chat = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
    error = assert_openai_error(echo_stack.http("POST", "/v1/chat/completions", json={**chat, "seed": HUGE}), 400)
    assert error["param"] == "seed"
    deep = "[" * 100_000 + "]" * 100_000
    response = echo_stack.http(
        "POST", "/v1/chat/completions", content=deep, headers={"Content-Type": "application/json"}
    )
    assert assert_openai_error(response, 400)["code"] == "invalid_json"
    surrogate = '{"model": "echo", "messages": [{"role": "user", "content": "\\ud800"}]}'
    response = echo_stack.http(
        "POST", "/v1/chat/completions", content=surrogate, headers={"Content-Type": "application/json"}
    )
    assert assert_openai_error(response, 400)["param"] == "messages[0].content"
    for name, value in {"logit_bias": {"1": 5}, "tools": [{"type": "function"}],
                        "response_format": {"type": "json_schema"}}.items():  # fmt: skip
        response = echo_stack.http("POST", "/v1/chat/completions", json={**chat, name: value})
        error = assert_openai_error(response, 400)
        assert error["param"] == name and error["code"] == "unsupported_parameter"
    response = echo_stack.http("POST", "/v1/audio/transcriptions", content=b"--x\r\n\r\n",
                               headers={"Content-Type": "multipart/form-data"})  # fmt: skip
    assert assert_openai_error(response, 400)["code"] == "invalid_multipart"
