"""The history leaves the request path and loses nothing: rows and usage records are written by
the history writer (a process of its own) from the Redis log, so a writer killed mid-burst
(SIGKILL) costs no row once it is back; 200 concurrent requests add up to usage totals equal to
what was sent; every request's row ends in its final state (success, failure, disconnect,
cancel), readable at once through the API even before the writer wrote it."""

from __future__ import annotations

import asyncio
import json
import signal

import httpx
import pytest
from asgiref.sync import sync_to_async
from history_testing import HISTORY_WRITER, pending_count
from websockets.asyncio.client import connect

from control_plane.accounts.models import UsageRecord
from control_plane.inference.models import InferenceRequest

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CONCURRENT = 200
BURST = {
    "stages": {"echo": {"options": {"delay_s": 0.005}, "max_waiting": 4 * CONCURRENT}},
    "max_queue": 4 * CONCURRENT,
}


def chat(words: int, **extra) -> dict:
    text = " ".join(f"w{i}" for i in range(words))
    return {"model": "burst", "messages": [{"role": "user", "content": text}], "max_tokens": 64, **extra}


async def post_all(stack, bodies: list[dict]) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=0)
    timeout = httpx.Timeout(300.0, connect=120.0)
    headers = {"Authorization": f"Bearer {stack.user_secret}"}
    async with httpx.AsyncClient(base_url=stack.base, headers=headers, limits=limits, timeout=timeout) as client:
        return await asyncio.gather(*(client.post("/v1/chat/completions", json=body) for body in bodies))


def test_history_survives_its_writer_and_adds_up(serving_stack):
    serving_stack.deploy("burst", "echo", deploy_config=BURST)
    serving_stack.deploy("echo-voice", "echo-voice", deploy_config={"stages": {"echo": {"options": {"delay_s": 0.02}}}})
    serving_stack.wait_running("burst", "echo-voice")
    a_writer_killed_mid_burst_loses_no_row(serving_stack)
    usage_totals_equal_the_requests_sent_under_200_concurrent(serving_stack)
    rows_end_in_their_final_state(serving_stack)


def a_writer_killed_mid_burst_loses_no_row(stack) -> None:
    bodies = [chat(1 + i % 9) for i in range(120)]

    async def burst_with_a_kill() -> list[httpx.Response]:
        sending = asyncio.ensure_future(post_all(stack, bodies))
        rows = sync_to_async(InferenceRequest.objects.filter(deployment_name="burst").count)
        while await rows() < 10:  # the writer is writing
            await asyncio.sleep(0.05)
        stack.procs["history"].signal(signal.SIGKILL)
        return await sending

    responses = asyncio.run(burst_with_a_kill())
    assert [response.status_code for response in responses] == [200] * len(bodies)  # serving never waited on it
    stack.procs["history"].process.wait()
    written_while_down = InferenceRequest.objects.filter(deployment_name="burst", status="completed").count()
    assert written_while_down < len(bodies) and pending_count(stack.redis.url) > 0
    stack.procs["history"] = stack._proc("history", HISTORY_WRITER)  # back: it writes what was accepted
    stack.history_written()
    rows = InferenceRequest.objects.filter(deployment_name="burst")
    assert rows.count() == len(bodies) and rows.filter(status="completed", http_status=200).count() == len(bodies)
    by_id = {row.request_id: row for row in rows}
    for body, response in zip(bodies, responses, strict=True):
        reply = response.json()
        row = by_id[reply["id"]]
        assert row.output_text == reply["choices"][0]["message"]["content"] == body["messages"][0]["content"]
        assert row.usage["text"]["completion_tokens"] == reply["usage"]["completion_tokens"]
    assert UsageRecord.objects.filter(request_id__in=by_id).count() == len(bodies)


def usage_totals_equal_the_requests_sent_under_200_concurrent(stack) -> None:
    before = stack.http("GET", "/api/usage/", params={"deployment": "burst"}).json()["totals"]
    bodies = [chat(1 + i % 13) for i in range(CONCURRENT)]
    responses = asyncio.run(post_all(stack, bodies))
    assert [response.status_code for response in responses] == [200] * CONCURRENT
    sent_words = sum(len(body["messages"][0]["content"].split()) for body in bodies)
    reported = [response.json()["usage"] for response in responses]
    assert sum(usage["completion_tokens"] for usage in reported) == sent_words  # echo answers every word

    totals = stack.http("GET", "/api/usage/", params={"deployment": "burst"}).json()["totals"]  # at once: exact
    assert totals["requests"] - before["requests"] == CONCURRENT
    assert totals["text_tokens_out"] - before["text_tokens_out"] == sent_words
    assert totals["text_tokens_in"] - before["text_tokens_in"] == sum(usage["prompt_tokens"] for usage in reported)
    stack.history_written()
    ids = [response.json()["id"] for response in responses]
    assert UsageRecord.objects.filter(request_id__in=ids).count() == CONCURRENT
    assert InferenceRequest.objects.filter(request_id__in=ids, status="completed").count() == CONCURRENT


def rows_end_in_their_final_state(stack) -> None:
    ok = stack.http("POST", "/v1/chat/completions", json=chat(3)).json()["id"]
    failing = stack.http("POST", "/v1/chat/completions", json=chat(3, additional_information={"echo_fail": True}))
    assert failing.status_code == 500
    gone = disconnect_after_the_first_chunk(stack)
    cancelled = asyncio.run(cancel_a_realtime_response(stack))
    expected = {ok: ("completed", 200), gone: ("cancelled", 499), cancelled: ("cancelled", 499)}
    for request_id, (status, http_status) in expected.items():
        detail = stack.http("GET", f"/api/requests/{request_id}/").json()  # read at once, the writer or not
        assert (detail["status"], detail["http_status"]) == (status, http_status), detail
        assert detail["finished_at"] is not None
    stack.history_written()
    failed = InferenceRequest.objects.get(deployment_name="burst", status="failed")
    assert failed.http_status == 500 and failed.error["code"] == "echo_fail"
    for request_id, (status, http_status) in expected.items():
        row = InferenceRequest.objects.get(request_id=request_id)
        assert (row.status, row.http_status) == (status, http_status)
    assert InferenceRequest.objects.get(request_id=gone).error["code"] == "client_disconnected"
    assert InferenceRequest.objects.get(request_id=cancelled).error["code"] == "client_cancelled"
    assert not InferenceRequest.objects.filter(status__in=("queued", "running")).exists()


def disconnect_after_the_first_chunk(stack) -> str:
    body = {**chat(400), "max_tokens": 400, "stream": True}
    headers = {"Authorization": f"Bearer {stack.user_secret}"}
    with httpx.stream("POST", f"{stack.base}/v1/chat/completions", json=body, headers=headers, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                return json.loads(line[6:])["id"]  # leaving the block hangs up
    raise AssertionError("no chunk arrived")


async def cancel_a_realtime_response(stack) -> str:
    url = f"ws://127.0.0.1:{stack.port}/v1/realtime?model=echo-voice"
    headers = {"Authorization": f"Bearer {stack.user_secret}"}
    async with connect(url, additional_headers=headers) as ws:
        await ws.send(json.dumps({"type": "session.update", "session": {"output_modalities": ["text"]}}))
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": " ".join(["la"] * 300)}]}
        await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
        await ws.send(json.dumps({"type": "response.create"}))
        response_id = None
        async with asyncio.timeout(60):
            while True:
                event = json.loads(await ws.recv())
                if event["type"] == "response.created":
                    response_id = event["response"]["id"]
                if event["type"] == "response.output_text.delta":
                    await ws.send(json.dumps({"type": "response.cancel"}))
                if event["type"] == "response.done":
                    assert event["response"]["status"] == "cancelled", event
                    return response_id
