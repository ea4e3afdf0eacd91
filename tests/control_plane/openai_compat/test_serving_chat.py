"""/v1/models, chat completions and completions through the official OpenAI SDK against
the live platform (echo pipelines), with their history rows."""

from __future__ import annotations

import base64
import io
import wave

import pytest

from control_plane.inference.models import InferenceRequest

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ECHO_RATE = 16000
SAMPLES_PER_PIECE = 160


def test_models_chat_and_completions_through_the_sdk(echo_stack):
    text_routes(echo_stack)
    chat_with_text_and_audio_output(echo_stack)


def text_routes(echo_stack):
    client = echo_stack.client()

    models = {model.id: model for model in client.models.list().data}
    assert set(models) == {"echo", "echo-voice"}
    assert models["echo-voice"].model_extra["modalities"] == ["text", "audio"]

    reply = client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "hello big wide world"}])
    assert reply.object == "chat.completion" and reply.model == "echo"
    assert reply.choices[0].message.content == "hello big wide world"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage.completion_tokens == 4

    limited = client.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "one two three four"}], max_tokens=2
    )
    assert limited.choices[0].message.content == "one two" and limited.choices[0].finish_reason == "length"

    stream = client.chat.completions.create(
        model="echo",
        messages=[{"role": "user", "content": [{"type": "text", "text": "streamed words arrive"}]}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(deltas) == "streamed words arrive" and len(deltas) == 3
    assert chunks[-1].usage.completion_tokens == 3 and chunks[-1].choices == []
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"

    completion = client.completions.create(model="echo", prompt="plain prompt here", max_tokens=10)
    assert completion.choices[0].text == "plain prompt here"
    pieces = [c.choices[0].text for c in client.completions.create(model="echo", prompt="a b c", stream=True)]
    assert "".join(pieces) == "a b c"

    echo_stack.history_written()
    rows = InferenceRequest.objects.filter(user__username="serving-user").order_by("created_at")
    assert [row.route for row in rows] == ["chat.completions"] * 3 + ["completions"] * 2
    assert all(row.status == "completed" and row.http_status == 200 for row in rows)
    first = rows[0]
    assert first.output_text == "hello big wide world" and first.deployment_name == "echo"
    assert first.e2el_s > 0 and first.ttft_s is not None and first.usage["text"]["completion_tokens"] == 4
    assert first.inputs["messages"][0]["content"] == "hello big wide world"


def wav_of(data: bytes) -> tuple[int, int]:
    with wave.open(io.BytesIO(data)) as wav:
        return wav.getframerate(), wav.getnframes()


def chat_with_text_and_audio_output(echo_stack):
    client = echo_stack.client()
    words = "sing me four words"

    reply = client.chat.completions.create(
        model="echo-voice",
        modalities=["text", "audio"],
        audio={"voice": "alloy", "format": "wav"},
        messages=[{"role": "user", "content": words}],
    )
    message = reply.choices[0].message
    assert message.content == words and message.audio.transcript == words
    rate, frames = wav_of(base64.b64decode(message.audio.data))
    assert rate == ECHO_RATE and frames == 4 * SAMPLES_PER_PIECE
    assert reply.usage.completion_tokens_details.audio_tokens == 4

    stream = client.chat.completions.create(
        model="echo-voice",
        modalities=["text", "audio"],
        audio={"voice": "alloy", "format": "pcm16"},
        messages=[{"role": "user", "content": words}],
        stream=True,
    )
    text, pcm, transcript, expiry = [], b"", "", None
    for chunk in stream:
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta is None:
            continue
        if delta.content:
            text.append(delta.content)
        if delta.audio and delta.audio.data:
            pcm += base64.b64decode(delta.audio.data)
        if delta.audio and delta.audio.transcript:
            transcript += delta.audio.transcript
        if delta.audio and delta.audio.expires_at:
            expiry = delta.audio.expires_at
    assert "".join(text) == words and transcript == words and expiry
    assert len(pcm) == 2 * 4 * SAMPLES_PER_PIECE

    echo_stack.history_written()
    row = InferenceRequest.objects.get(request_id=reply.id)
    assert row.modality_list == ["text", "audio"] and row.usage["audio"]["seconds"] == pytest.approx(0.04)
    audio = row.artifacts.get(kind="audio")
    assert audio.mime_type == "audio/wav" and wav_of(audio.file.read())[1] == 4 * SAMPLES_PER_PIECE

    only_audio = client.chat.completions.create(
        model="echo-voice", modalities=["audio"], audio={"voice": "x", "format": "flac"},
        messages=[{"role": "user", "content": "two words"}],
    )  # fmt: skip
    assert only_audio.choices[0].message.content is None
    assert only_audio.choices[0].message.audio.transcript == "two words"
