"""One chat, three interfaces, one bill: the same chat sent through /v1/chat/completions, the
console's chat playground and a realtime session records the same usage, on both AR
backends (our torch engine and vLLM), and the prompt tokens recorded are the ones the
thinker read (its chat template applied to the messages, counted by its own tokenizer)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from procs import REPO
from tiny_checkpoints import tiny_checkpoint
from websockets.asyncio.client import connect

from control_plane.accounts.models import UsageRecord
from control_plane.asgi import application
from control_plane.inference.models import InferenceRequest

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TEXT = "Tell me about the sea and the sky"
MAX_TOKENS = 8
BACKENDS = {
    "torch": {"backend": "torch", "max_length": 256},
    "vllm": {"backend": "vllm", "max_length": 256, "max_batch": 4, "kv_memory_mb": 512},
}


@pytest.fixture(scope="session")
def tiny_llm() -> Path:
    return tiny_checkpoint("qwen2")


def thinker_prompt_tokens(model_dir: Path) -> int:
    from stages.models.llm import apply_chat_template

    return len(apply_chat_template(model_dir, [{"role": "user", "content": TEXT}]))


def through_the_api(stack, model: str) -> tuple[str, dict]:
    body = {"model": model, "messages": [{"role": "user", "content": TEXT}], "max_tokens": MAX_TOKENS,
            "temperature": 0}  # fmt: skip
    reply = stack.http("POST", "/v1/chat/completions", json=body, timeout=300)
    assert reply.status_code == 200, reply.text
    return reply.json()["id"], reply.json()["usage"]


async def through_the_console(user, model: str, voice: str = "") -> str:
    client = Client()
    await sync_to_async(client.force_login)(user)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", cookie)]
    communicator = WebsocketCommunicator(application, "/ws/console/playground/", headers=headers)
    assert (await communicator.connect())[0]
    try:
        data = {"prompt": TEXT, "max_tokens": MAX_TOKENS, "temperature": 0, "voice": voice}
        await communicator.send_json_to({"type": "run", "ref": "r", "mode": "chat", "deployment": model, "input": data})
        while True:
            event = await communicator.receive_json_from(timeout=300)
            assert event["type"] != "error", event
            if event["type"] == "done":
                return event["request_id"]
    finally:
        await communicator.disconnect()


async def through_realtime(stack, model: str, modalities: tuple[str, ...] = ("text",)) -> tuple[str, dict]:
    headers = {"Authorization": f"Bearer {stack.user_secret}"}
    async with connect(f"ws://127.0.0.1:{stack.port}/v1/realtime?model={model}", additional_headers=headers) as ws:
        session = {"output_modalities": list(modalities), "max_output_tokens": MAX_TOKENS, "temperature": 0}
        await ws.send(json.dumps({"type": "session.update", "session": session}))
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": TEXT}]}
        await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
        await ws.send(json.dumps({"type": "response.create"}))
        async with asyncio.timeout(300):
            while True:
                event = json.loads(await ws.recv())
                assert event["type"] != "error", event
                if event["type"] == "response.done":
                    assert event["response"]["status"] == "completed", event
                    return event["response"]["id"], event["response"]["usage"]


def test_the_same_chat_bills_the_same_through_every_interface_on_both_backends(
    serving_stack, serving_users, tiny_llm, settings
):
    settings.REDIS_URL = serving_stack.redis.url  # the console's consumer runs in this process
    for backend, stage in BACKENDS.items():
        serving_stack.deploy(f"llm-{backend}", "llm", model_dir=str(tiny_llm), deploy_config={"stages": {"llm": stage}})
    serving_stack.wait_running(*(f"llm-{backend}" for backend in BACKENDS), timeout=600)
    read = thinker_prompt_tokens(tiny_llm)
    user = serving_users["user"][0]

    for backend in BACKENDS:
        model = f"llm-{backend}"
        api_id, api_usage = through_the_api(serving_stack, model)
        console_id = asyncio.run(through_the_console(user, model))
        realtime_id, realtime_usage = asyncio.run(through_realtime(serving_stack, model))
        assert api_usage["prompt_tokens"] == read, backend
        assert realtime_usage["input_tokens"] == read, backend
        assert 0 < api_usage["completion_tokens"] <= MAX_TOKENS

        serving_stack.history_written()
        records = {record.request_id: record for record in UsageRecord.objects.filter(
            request_id__in=[api_id, console_id, realtime_id])}  # fmt: skip
        assert len(records) == 3, backend
        billed = {(r.text_tokens_in, r.text_tokens_out) for r in records.values()}
        assert billed == {(read, api_usage["completion_tokens"])}, (backend, billed)  # greedy: the same answer
        rows = InferenceRequest.objects.filter(request_id__in=records)
        assert {json.dumps(row.usage["text"], sort_keys=True) for row in rows} == {
            json.dumps({"prompt_tokens": read, "completion_tokens": api_usage["completion_tokens"]}, sort_keys=True)
        }, backend
        assert {row.route for row in rows} == {"chat.completions", "realtime"}


OMNI_DIR = REPO / "var" / "models" / "qwen2_5_omni"
SHORT_TALKER = {"stages": {"talker": {"sampling": {"max_tokens": 24}}}}


def omni_prompt_tokens() -> int:
    from stages.models.qwen2_5_omni import processor

    tokenizer = processor(str(OMNI_DIR)).tokenizer
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": TEXT}], add_generation_prompt=True, tokenize=False
    )
    return len(tokenizer(text)["input_ids"])


def test_a_spoken_chat_bills_the_thinkers_prompt_through_every_interface(
    serving_stack, serving_users, settings, repo_tiny_models
):
    """The omni answering with audio: the thinker's prompt is billed whichever interface sent it."""
    settings.REDIS_URL = serving_stack.redis.url
    serving_stack.deploy("omni", "qwen2_5_omni", model_dir=str(OMNI_DIR), deploy_config=SHORT_TALKER)
    serving_stack.wait_running("omni", timeout=600)
    read = omni_prompt_tokens()
    body = {"model": "omni", "messages": [{"role": "user", "content": TEXT}], "max_tokens": MAX_TOKENS,
            "temperature": 0, "modalities": ["text", "audio"], "audio": {"voice": "Chelsie", "format": "wav"}}  # fmt: skip
    reply = serving_stack.http("POST", "/v1/chat/completions", json=body, timeout=300)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["audio"]["data"]
    console_id = asyncio.run(through_the_console(serving_users["user"][0], "omni", voice="Chelsie"))
    realtime_id, realtime_usage = asyncio.run(through_realtime(serving_stack, "omni", ("audio",)))
    assert reply.json()["usage"]["prompt_tokens"] == read
    assert realtime_usage["input_tokens"] == read

    serving_stack.history_written()
    ids = [reply.json()["id"], console_id, realtime_id]
    records = UsageRecord.objects.filter(request_id__in=ids)
    assert sorted((r.request_id, r.text_tokens_in) for r in records) == sorted((i, read) for i in ids)
    assert all(r.audio_seconds_out > 0 for r in records)
