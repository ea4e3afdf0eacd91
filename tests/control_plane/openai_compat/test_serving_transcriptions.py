"""/v1/audio/transcriptions and /v1/audio/translations through the official OpenAI SDK against the
live platform: the echo pipeline (its stage takes audio and echoes the instruction beside it, so the
answer shows what the model was asked) in every response format, streamed, and every bad input a
4xx naming its field; the tiny Qwen2.5-Omni hears a clip with its talker left out."""

from __future__ import annotations

import io

import numpy as np
import openai
import pytest
import soundfile

from control_plane.inference.models import InferenceRequest
from control_plane.openai_compat.transcription_inputs import TRANSCRIBE, TRANSLATE

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def clip(seconds: float = 1.5, rate: int = 16000, fmt: str = "WAV") -> bytes:
    t = np.arange(int(seconds * rate), dtype=np.float32) / rate
    out = io.BytesIO()
    soundfile.write(out, (0.2 * np.sin(2 * np.pi * 330 * t)).astype(np.float32), rate, format=fmt)
    return out.getvalue()


def test_transcriptions_and_translations_through_the_sdk(echo_stack):
    client = echo_stack.client()
    audio = ("hello.wav", clip(), "audio/wav")

    plain = client.audio.transcriptions.create(model="echo", file=audio)
    assert plain.text == TRANSCRIBE
    assert plain.usage.type == "tokens" and plain.usage.output_tokens == len(TRANSCRIBE.split())

    hinted = client.audio.transcriptions.create(model="echo", file=audio, language="fr", prompt="Zoë", temperature=0)
    assert hinted.text.startswith(TRANSCRIBE) and "in fr" in hinted.text and hinted.text.endswith("Zoë")

    text = client.audio.transcriptions.create(model="echo", file=audio, response_format="text")
    assert text == TRANSCRIBE

    srt = client.audio.transcriptions.create(model="echo", file=audio, response_format="srt")
    assert srt == f"1\n00:00:00,000 --> 00:00:01,500\n{TRANSCRIBE}\n\n"
    vtt = client.audio.transcriptions.create(model="echo", file=audio, response_format="vtt")
    assert vtt == f"WEBVTT\n\n00:00:00.000 --> 00:00:01.500\n{TRANSCRIBE}\n\n"

    verbose = client.audio.transcriptions.create(
        model="echo", file=("a.flac", clip(2.0, fmt="FLAC")), response_format="verbose_json",
        timestamp_granularities=["segment"], language="en",
    )  # fmt: skip
    assert verbose.text == TRANSCRIBE + " The speech is in en; write it in that language."
    assert verbose.duration == pytest.approx(2.0) and verbose.language == "en"
    assert verbose.segments[0].start == 0 and verbose.segments[0].end == pytest.approx(2.0)

    events = list(client.audio.transcriptions.create(model="echo", file=audio, stream=True))
    deltas = [e.delta for e in events if e.type == "transcript.text.delta"]
    assert len(deltas) == len(TRANSCRIBE.split()) and "".join(deltas) == TRANSCRIBE
    assert events[-1].type == "transcript.text.done" and events[-1].text == TRANSCRIBE
    assert events[-1].usage.output_tokens == len(deltas)

    translated = client.audio.translations.create(model="echo", file=audio)
    assert translated.text == TRANSLATE
    assert client.audio.translations.create(model="echo", file=audio, response_format="text") == TRANSLATE
    verbose_translation = client.audio.translations.create(model="echo", file=audio, response_format="verbose_json")
    assert verbose_translation.language == "english" and verbose_translation.text == TRANSLATE

    echo_stack.history_written()
    row = InferenceRequest.objects.get(route="audio.translations", parameters__response_format="json")
    assert row.status == "completed" and row.output_text == TRANSLATE and row.modality_list == ["text"]
    assert row.inputs["file"]["format"] == "wav" and row.inputs["file"]["duration_s"] == pytest.approx(1.5)
    assert row.usage["audio_in"]["seconds"] == pytest.approx(1.5)
    heard = row.artifacts.get(kind="audio")
    assert heard.meta["direction"] == "in" and heard.meta["duration_s"] == pytest.approx(1.5)

    bad_inputs(echo_stack, client, audio)


def bad_inputs(echo_stack, client, audio):
    cases = [
        (dict(model="echo", file=("n.wav", b"not audio at all")), 400, "file"),
        (dict(model="echo", file=audio, response_format="docx"), 400, "response_format"),
        (dict(model="echo", file=audio, temperature=1.5), 400, "temperature"),
        (dict(model="echo", file=audio, response_format="srt", stream=True), 400, "response_format"),
        (dict(model="echo", file=audio, timestamp_granularities=["word"], response_format="verbose_json"), 400,
         "timestamp_granularities"),
        (dict(model="echo-voice", file=audio), 400, "model"),
        (dict(model="nope", file=audio), 404, "model"),
    ]  # fmt: skip
    for fields, status, param in cases:
        with pytest.raises(openai.APIStatusError) as raised:
            client.audio.transcriptions.create(**fields)
        assert raised.value.status_code == status, fields
        assert raised.value.body["param"] == param and raised.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError) as raised:
        client.audio.translations.create(model="echo", file=audio, extra_body={"stream": True})
    assert raised.value.body["param"] == "stream"

    missing_file = echo_stack.http("POST", "/v1/audio/transcriptions", data={"model": "echo"})
    assert missing_file.status_code == 400 and missing_file.json()["error"]["param"] == "file"
    missing_model = echo_stack.http("POST", "/v1/audio/transcriptions", files={"file": ("a.wav", clip())})
    assert missing_model.status_code == 400 and missing_model.json()["error"]["param"] == "model"
    as_json = echo_stack.http("POST", "/v1/audio/transcriptions", json={"model": "echo"})
    assert as_json.status_code == 415 and as_json.json()["error"]["type"] == "invalid_request_error"


def test_the_omni_thinker_transcribes_without_its_talker(serving_stack, tiny_omni):
    serving_stack.deploy("omni", "qwen2_5_omni", model_dir=str(tiny_omni))
    serving_stack.wait_running("omni", timeout=600)
    client = serving_stack.client(timeout=300)
    audio = ("speech.wav", clip(1.0), "audio/wav")

    first = client.audio.transcriptions.create(model="omni", file=audio, extra_body={"max_tokens": 6})
    again = client.audio.transcriptions.create(model="omni", file=audio, extra_body={"max_tokens": 6})
    assert first.text and first.text == again.text  # the thinker decodes greedily by default
    assert first.usage.output_tokens == 6 and first.usage.input_tokens > 6
    translated = client.audio.translations.create(model="omni", file=audio, extra_body={"max_tokens": 6})
    assert translated.text
    streamed = list(client.audio.transcriptions.create(model="omni", file=audio, stream=True,
                                                       extra_body={"max_tokens": 6}))  # fmt: skip
    assert streamed[-1].type == "transcript.text.done" and streamed[-1].text == first.text

    serving_stack.history_written()
    rows = InferenceRequest.objects.filter(route__in=["audio.transcriptions", "audio.translations"])
    assert rows.count() == 4 and all(row.status == "completed" for row in rows)
    for row in rows:
        assert "audio" not in row.usage and row.usage["audio_in"]["seconds"] == pytest.approx(1.0)
        assert not any(key.startswith(("talker", "code2wav")) for key in row.stage_metrics)
        assert [a.meta["direction"] for a in row.artifacts.all()] == ["in"]
