"""/v1/responses through the official OpenAI SDK against the live platform (echo pipelines: the
answer is the last message's text): whole and streamed with its named events, text and audio out,
`previous_response_id` carrying the conversation through the history rows, retrieve and delete,
`store: false`, and every bad input a 4xx naming its field."""

from __future__ import annotations

import base64
import io
import wave

import openai
import pytest

from control_plane.inference.models import InferenceRequest

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PNG_1x1 = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def test_responses_through_the_sdk(echo_stack):
    client = echo_stack.client()
    first = client.responses.create(model="echo", input="hello there world", instructions="Answer kindly.")
    assert first.id.startswith("resp_") and first.object == "response" and first.status == "completed"
    assert first.output_text == "hello there world" and first.model == "echo"
    assert first.output[0].role == "assistant" and first.output[0].content[0].type == "output_text"
    assert first.usage.output_tokens == 3 and first.usage.total_tokens == first.usage.input_tokens + 3
    assert first.instructions == "Answer kindly." and first.store is True

    second = client.responses.create(
        model="echo",
        previous_response_id=first.id,
        input=[{"role": "user", "content": [{"type": "input_text", "text": "and"}, {"type": "input_text",
                                                                                   "text": " again"}]}],
    )  # fmt: skip
    assert second.output_text == "and again" and second.previous_response_id == first.id
    third = client.responses.create(model="echo", previous_response_id=second.id, input="last one")
    echo_stack.history_written()
    row = InferenceRequest.objects.get(request_id=third.id)
    assert row.route == "responses" and row.status == "completed"
    assert row.inputs["conversation"] == [
        {"role": "user", "content": "hello there world"},
        {"role": "assistant", "content": "hello there world"},
        {"role": "user", "content": "and again"},
        {"role": "assistant", "content": "and again"},
        {"role": "user", "content": "last one"},
    ]
    assert row.inputs["instructions"] is None  # instructions hold for their own response only

    events = list(client.responses.create(model="echo", input="streamed reply here", stream=True))
    kinds = [e.type for e in events]
    assert kinds == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        *["response.output_text.delta"] * 3, "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed",
    ]  # fmt: skip
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "streamed reply here"
    done = events[-1].response
    assert (
        done.output_text == "streamed reply here" and done.usage.output_tokens == 3 and done.id == events[0].response.id
    )

    fetched = client.responses.retrieve(first.id)
    assert fetched.output_text == "hello there world" and fetched.status == "completed"
    assert fetched.usage.output_tokens == 3 and fetched.instructions == "Answer kindly."
    inputs = client.responses.input_items.list(second.id, order="asc")
    assert [item.role for item in inputs.data] == ["user"]  # its own input, not the earlier turns
    assert inputs.data[0].content[0].type == "input_text" and inputs.data[0].content[0].text == "and again"
    streamed_later = client.responses.retrieve(done.id)
    assert streamed_later.output_text == "streamed reply here"

    cut = client.responses.create(model="echo", input=" ".join(["word"] * 20), max_output_tokens=16)
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    assert cut.output_text == " ".join(["word"] * 16)

    unstored = client.responses.create(model="echo", input="forget me", store=False)
    assert unstored.output_text == "forget me" and unstored.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)

    deleted = client.responses.delete(first.id)
    assert deleted is None or getattr(deleted, "deleted", True)
    with pytest.raises(openai.NotFoundError) as gone:
        client.responses.retrieve(first.id)
    assert gone.value.body["param"] == "response_id"
    with pytest.raises(openai.BadRequestError) as unknown_previous:
        client.responses.create(model="echo", input="x", previous_response_id=first.id)
    assert unknown_previous.value.body["param"] == "previous_response_id"
    echo_stack.history_written()
    assert InferenceRequest.objects.get(request_id=first.id).deleted_at is not None  # the history keeps it

    with_audio(echo_stack, client)
    bad_inputs(echo_stack, client)


def with_audio(echo_stack, client):
    spoken = client.responses.create(
        model="echo-voice", input="two words", extra_body={"modalities": ["text", "audio"]}
    )
    text, audio = spoken.output[0].content
    assert text.text == "two words" and audio.type == "output_audio" and audio.transcript == "two words"
    with wave.open(io.BytesIO(base64.b64decode(audio.data))) as wav:
        assert wav.getnframes() == 2 * 160
    assert client.responses.retrieve(spoken.id).output[0].content[1].data == audio.data

    events = list(client.responses.create(model="echo-voice", input="three small words", stream=True,
                                          extra_body={"modalities": ["audio"]}))  # fmt: skip
    pcm = b"".join(base64.b64decode(e.delta) for e in events if e.type == "response.audio.delta")
    assert len(pcm) == 2 * 3 * 160
    transcript = "".join(e.delta for e in events if e.type == "response.audio.transcript.delta")
    assert transcript == "three small words" and events[-1].type == "response.completed"
    assert not any(e.type == "response.output_text.delta" for e in events)


def bad_inputs(echo_stack, client):
    cases = [
        (dict(model="echo", input=[]), 400, "input"),
        (dict(model="echo", input="x", temperature=3), 400, "temperature"),
        (dict(model="echo", input="x", max_output_tokens=3), 400, "max_output_tokens"),
        (dict(model="echo", input="x", tools=[{"type": "web_search"}]), 400, "tools"),
        (dict(model="echo", input="x", text={"format": {"type": "json_object"}}), 400, "text.format.type"),
        (dict(model="echo", input=[{"type": "function_call_output", "call_id": "c", "output": "o"}]), 400,
         "input[0].type"),
        (dict(model="echo", input=[{"role": "wizard", "content": "x"}]), 400, "input[0].role"),
        (dict(model="echo", input=[{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]), 400,
         "input[0].content[0].type"),
        (dict(model="echo", input=[{"role": "user", "content": [{"type": "input_image",
                                                                  "image_url": "data:image/png;base64,AAAA"}]}]),
         400, "input[0].content[0].image_url"),
        (dict(model="echo", input="x", previous_response_id="resp_nothing"), 400, "previous_response_id"),
        (dict(model="echo", input="x", extra_body={"modalities": ["image"]}), 400, "modalities"),
        (dict(model="echo-voice", input="x", extra_body={"modalities": ["audio"], "audio": {"format": "aiff"}}), 400,
         "audio.format"),
        (dict(model="nope", input="x"), 404, "model"),
        (dict(model="echo", input=42), 400, "input"),
    ]  # fmt: skip
    for fields, status, param in cases:
        with pytest.raises(openai.APIStatusError) as raised:
            client.responses.create(**fields)
        assert raised.value.status_code == status, fields
        assert raised.value.body["param"] == param, (fields, raised.value.body)
    image = client.responses.create(
        model="echo", input=[{"role": "user", "content": [{"type": "input_image", "image_url": PNG_1x1},
                                                           {"type": "input_text", "text": "what is it"}]}],
    )  # fmt: skip
    assert image.output_text == "what is it"
    (item,) = client.responses.input_items.list(image.id).data
    assert [part.type for part in item.content] == ["input_image", "input_text"]
    assert item.content[0].image_url.startswith("<image/png data, ")
    with pytest.raises(openai.BadRequestError) as bad_order:
        client.responses.input_items.list(image.id, extra_query={"order": "sideways"})
    assert bad_order.value.body["param"] == "order"
    missing = echo_stack.http("POST", "/v1/responses", json={"model": "echo"})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "input"
    wrong_method = echo_stack.http("PUT", f"/v1/responses/{image.id}")
    assert wrong_method.status_code == 405
