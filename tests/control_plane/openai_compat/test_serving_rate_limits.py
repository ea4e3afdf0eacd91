"""Quotas on the live /v1 routes: the x-ratelimit-* headers OpenAI clients read on every
admitted response (streamed ones too) and on the 429; 200 concurrent HTTP requests against
a quota of 50 admit exactly 50, and the usage API adds up to what the 50 responses reported."""

from __future__ import annotations

import asyncio
import re
from collections import Counter

import httpx
import pytest

from control_plane.accounts.models import Metric, Quota, Window
from control_plane.accounts.services import api_key_create
from control_plane.inference.models import InferenceRequest

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Go-style durations, as OpenAI sends them: "20ms", "59s", "6m0s", "23h59m59s"
RESET = re.compile(r"^(?:\d+h)?(?:\d+m)?\d+s$|^\d+ms$")
CONCURRENT = 200
QUOTA = 50
ECHO = {"stages": {"echo": {"options": {"delay_s": 0.01}, "max_waiting": CONCURRENT}}, "max_queue": CONCURRENT}


def messages(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def metered_user(django_user_model, name: str, **limits: int) -> str:
    """A user with per-day quotas (`requests=`, `text_tokens=`); returns an inference key."""
    user = django_user_model.objects.create_user(name, password="x")
    _, secret = api_key_create(user=user, name=name, scopes=["inference"])
    for metric, limit in limits.items():
        Quota.objects.create(user=user, metric=Metric(metric), window=Window.DAY, limit=limit)
    return secret


def assert_rate_limit_headers(headers, *, requests: int, remaining: int, tokens: int | None = None) -> None:
    assert headers["x-ratelimit-limit-requests"] == str(requests)
    assert headers["x-ratelimit-remaining-requests"] == str(remaining)
    assert RESET.match(headers["x-ratelimit-reset-requests"]), headers["x-ratelimit-reset-requests"]
    if tokens is not None:
        assert headers["x-ratelimit-limit-tokens"] == str(tokens)
        assert RESET.match(headers["x-ratelimit-reset-tokens"]), headers["x-ratelimit-reset-tokens"]


def test_rate_limit_headers_and_200_concurrent_requests_against_a_quota_of_50(serving_stack, django_user_model):
    serving_stack.deploy("echo", "echo", deploy_config=ECHO)
    serving_stack.wait_running("echo")
    headers_on_every_response_of_an_admitted_request(serving_stack, django_user_model)
    exactly_the_quota_of_concurrent_requests_is_admitted(serving_stack, django_user_model)


def headers_on_every_response_of_an_admitted_request(stack, django_user_model):
    secret = metered_user(django_user_model, "metered", requests=5, text_tokens=1000)
    client = stack.client(secret)

    raw = client.chat.completions.with_raw_response.create(model="echo", messages=messages("one two"), max_tokens=16)
    reply = raw.parse()
    assert reply.choices[0].message.content == "one two"
    assert_rate_limit_headers(raw.headers, requests=5, remaining=4, tokens=1000)
    assert raw.headers["x-ratelimit-remaining-tokens"] == str(1000 - 16)  # max_tokens is reserved at admission
    spent = reply.usage.prompt_tokens + reply.usage.completion_tokens

    with client.chat.completions.with_streaming_response.create(
        model="echo", messages=messages("streamed words here"), max_tokens=16, stream=True
    ) as streamed:
        assert_rate_limit_headers(streamed.headers, requests=5, remaining=3, tokens=1000)
        assert streamed.headers["x-ratelimit-remaining-tokens"] == str(1000 - spent - 16)  # the first was settled
        text = "".join(chunk.choices[0].delta.content or "" for chunk in streamed.parse() if chunk.choices)
    assert text == "streamed words here"

    completion = client.completions.with_raw_response.create(model="echo", prompt="a b", max_tokens=4)
    assert completion.parse().choices[0].text == "a b"
    assert_rate_limit_headers(completion.headers, requests=5, remaining=2, tokens=1000)

    # a request that was admitted and then failed in the engine still reports the limits
    failed = stack.http("POST", "/v1/chat/completions", secret=secret, json={
        "model": "echo", "messages": messages("x"), "additional_information": {"echo_fail": True}})  # fmt: skip
    assert failed.status_code == 500 and failed.json()["error"]["code"] == "echo_fail"
    assert_rate_limit_headers(failed.headers, requests=5, remaining=1, tokens=1000)

    last = stack.http("POST", "/v1/chat/completions", secret=secret, json={"model": "echo", "messages": messages("x")})
    assert last.status_code == 200
    assert_rate_limit_headers(last.headers, requests=5, remaining=0, tokens=1000)

    refused = stack.http(
        "POST", "/v1/chat/completions", secret=secret, json={"model": "echo", "messages": messages("x")}
    )
    assert refused.status_code == 429 and refused.reason_phrase == "Too Many Requests"  # the status line daphne wrote
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert_rate_limit_headers(refused.headers, requests=5, remaining=0, tokens=1000)
    assert int(refused.headers["Retry-After"]) >= 1 and int(refused.headers["retry-after-ms"]) >= 1000


async def post_concurrently(base: str, secret: str, bodies: list[dict]) -> list[httpx.Response]:
    """Every body at once, each on its own connection; generous timeouts for a loaded machine."""
    limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=0)
    timeout = httpx.Timeout(300.0, connect=120.0)
    headers = {"Authorization": f"Bearer {secret}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=timeout) as client:
        sends = [client.post("/v1/chat/completions", json=body) for body in bodies]
        return await asyncio.wait_for(asyncio.gather(*sends), timeout=540)


def exactly_the_quota_of_concurrent_requests_is_admitted(stack, django_user_model):
    secret = metered_user(django_user_model, "burst", requests=QUOTA, text_tokens=10**9)
    bodies = [
        {"model": "echo", "messages": messages(" ".join(["word"] * (1 + i % 7))), "max_tokens": 32}
        for i in range(CONCURRENT)
    ]
    responses = asyncio.run(post_concurrently(stack.base, secret, bodies))

    statuses = Counter(response.status_code for response in responses)
    unexpected = [r.text[:300] for r in responses if r.status_code not in (200, 429)]
    assert statuses == {200: QUOTA, 429: CONCURRENT - QUOTA}, (statuses, unexpected[:3])
    admitted = [response for response in responses if response.status_code == 200]
    refused = [response for response in responses if response.status_code == 429]

    for response in refused:
        body = response.json()
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
        assert body["error"]["code"] == "rate_limit_exceeded" and body["error"]["type"] == "requests"
        assert int(response.headers["Retry-After"]) >= 1
        assert_rate_limit_headers(response.headers, requests=QUOTA, remaining=0)
    # atomic admission: each admitted request saw its own count, 49 left down to 0 left
    remaining = sorted(int(response.headers["x-ratelimit-remaining-requests"]) for response in admitted)
    assert remaining == list(range(QUOTA))

    usage = [response.json()["usage"] for response in admitted]
    report = stack.http("GET", "/api/usage/", secret=secret)
    assert report.status_code == 200, report.text
    totals = report.json()["totals"]
    assert totals["requests"] == QUOTA
    assert totals["text_tokens_in"] == sum(u["prompt_tokens"] for u in usage)
    assert totals["text_tokens_out"] == sum(u["completion_tokens"] for u in usage)
    assert totals["text_tokens_out"] == sum(len(response.json()["choices"][0]["message"]["content"].split())
                                            for response in admitted)  # fmt: skip

    stack.history_written()
    rows = InferenceRequest.objects.filter(user__username="burst")
    assert rows.filter(status="completed", http_status=200).count() == QUOTA
    assert rows.filter(status="failed", http_status=429).count() == CONCURRENT - QUOTA
