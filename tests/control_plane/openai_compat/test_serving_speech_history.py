"""/v1/audio/speech (plain, SSE, raw chunked) through the SDK; the request history REST
(filters, ownership, artifacts, signed URLs), the Prometheus counters and retention."""

from __future__ import annotations

import base64
import io
import json
import struct
import wave
from datetime import timedelta

import httpx
import pytest
import soundfile
from django.core.management import call_command
from django.utils import timezone

from control_plane.inference.models import Artifact, InferenceRequest

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RATE = 16000
PIECE = 160


@pytest.mark.fresh_platform  # its Prometheus totals (kept in the platform's Redis) count this test's requests only
def test_speech_and_request_history(echo_stack, serving_users, settings):
    speech_plain_streamed_and_raw(echo_stack)
    history_rest_ownership_artifacts_signed_urls_metrics_and_retention(echo_stack, serving_users, settings)


def speech_plain_streamed_and_raw(echo_stack):
    client = echo_stack.client()
    text = "four words to say"

    wav_bytes = client.audio.speech.create(model="echo-voice", voice="alloy", input=text, response_format="wav").read()
    with wave.open(io.BytesIO(wav_bytes)) as wav:
        assert wav.getframerate() == RATE and wav.getnframes() == 4 * PIECE and wav.getnchannels() == 1

    fast = client.audio.speech.create(model="echo-voice", voice="alloy", input=text, response_format="wav", speed=2.0)
    with wave.open(io.BytesIO(fast.read())) as wav:
        assert wav.getnframes() == 2 * PIECE

    for fmt in ("flac", "mp3", "opus"):
        data = client.audio.speech.create(model="echo-voice", voice="alloy", input=text, response_format=fmt).read()
        samples, rate = soundfile.read(io.BytesIO(data))
        expected_rate = RATE
        assert rate == expected_rate, fmt
        assert abs(len(samples) - 4 * PIECE) <= 1200, (fmt, len(samples))  # mp3/opus pad their frames

    pcm = client.audio.speech.create(model="echo-voice", voice="alloy", input=text, response_format="pcm").read()
    assert len(pcm) == 2 * 4 * PIECE

    with client.audio.speech.with_streaming_response.create(
        model="echo-voice", voice="alloy", input=text, response_format="pcm", stream_format="sse"
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) == 4 and events[-1]["type"] == "speech.audio.done"
    assert sum(len(base64.b64decode(e["audio"])) for e in deltas) == 2 * 4 * PIECE
    assert events[-1]["usage"]["output_tokens"] == 4 and events[-1]["usage"]["audio_seconds"] == pytest.approx(0.04)

    raw = b""
    with httpx.stream(
        "POST",
        f"{echo_stack.base}/v1/audio/speech",
        headers={"Authorization": f"Bearer {echo_stack.user_secret}"},
        json={"model": "echo-voice", "input": text, "response_format": "wav", "stream_format": "audio"},
    ) as response:
        assert response.headers["content-type"] == "audio/wav"
        for chunk in response.iter_bytes():
            raw += chunk
    assert raw[:4] == b"RIFF" and raw[8:16] == b"WAVEfmt " and struct.unpack("<I", raw[24:28])[0] == RATE
    assert len(raw) - 44 == 2 * 4 * PIECE

    echo_stack.history_written()
    rows = InferenceRequest.objects.filter(route="audio.speech")
    assert rows.count() == 8 and set(rows.values_list("status", flat=True)) == {"completed"}
    assert rows.filter(stream=True).count() == 2
    assert Artifact.objects.filter(request__route="audio.speech", kind="audio").count() == 8


def history_rest_ownership_artifacts_signed_urls_metrics_and_retention(echo_stack, serving_users, settings):
    user_client = echo_stack.client()
    reply = user_client.chat.completions.create(
        model="echo-voice", modalities=["text", "audio"], audio={"voice": "a", "format": "wav"},
        messages=[{"role": "user", "content": "voice me"}],
    )  # fmt: skip
    user_client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "plain"}])
    echo_stack.http(
        "POST", "/v1/chat/completions", json={"model": "nope", "messages": [{"role": "user", "content": "x"}]}
    )
    operator_client = echo_stack.client(echo_stack.operator_secret)
    operator_client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "operator's"}])

    mine = echo_stack.http("GET", "/api/requests/").json()
    assert mine["count"] == 3 + 8 and {r["user"] for r in mine["results"]} == {"serving-user"}
    audio_only = echo_stack.http("GET", "/api/requests/?modality=audio&route=chat.completions").json()["results"]
    assert [r["request_id"] for r in audio_only] == [reply.id]
    failed = echo_stack.http("GET", "/api/requests/?status=failed").json()["results"]
    assert len(failed) == 1 and failed[0]["http_status"] == 404 and failed[0]["error"]["code"] == "model_not_found"
    by_deployment = echo_stack.http("GET", "/api/requests/?deployment=echo&route=chat.completions").json()
    assert by_deployment["count"] == 1
    since = (timezone.now() + timedelta(days=1)).date().isoformat()
    assert echo_stack.http("GET", f"/api/requests/?since={since}").json()["count"] == 0
    assert echo_stack.http("GET", f"/api/requests/?user={serving_users['operator'][0].pk}").status_code == 403

    everyone = echo_stack.http("GET", "/api/requests/", secret=echo_stack.operator_secret).json()
    assert everyone["count"] == 4 + 8
    operator_id = serving_users["operator"][0].pk
    assert (
        echo_stack.http("GET", f"/api/requests/?user={operator_id}", secret=echo_stack.operator_secret).json()["count"]
        == 1
    )

    detail = echo_stack.http("GET", f"/api/requests/{reply.id}/").json()
    assert detail["status"] == "completed" and detail["output_text"] == "voice me"
    assert detail["modalities"] == ["text", "audio"] and detail["e2el_s"] > 0 and detail["ttfp_s"] is not None
    assert set(detail["stage_metrics"]) == {"echo", "voice"}
    (artifact,) = detail["artifacts"]
    assert artifact["kind"] == "audio" and artifact["meta"]["sample_rate"] == RATE
    download = echo_stack.http("GET", f"/api/artifacts/{artifact['id']}/content/")
    assert download.status_code == 200 and download.content[:4] == b"RIFF"
    other = echo_stack.http("GET", f"/api/requests/{reply.id}/", secret=echo_stack.operator_secret)
    assert other.status_code == 200  # admins see everyone's
    operator_row = InferenceRequest.objects.get(user=serving_users["operator"][0])
    assert echo_stack.http("GET", f"/api/requests/{operator_row.request_id}/").status_code == 404

    signed = httpx.get(artifact["signed_url"])  # no key: the signature is the credential
    assert signed.status_code == 200 and signed.content == download.content
    tampered = httpx.get(artifact["signed_url"].replace("/content", "x/content"))
    assert tampered.status_code in (403, 404) and "error" in tampered.json()

    # Prometheus counters, kept in the platform's Redis by whoever writes the history rows
    from control_plane.inference.metrics import render

    settings.REDIS_URL = echo_stack.redis.url
    text = render().decode()
    assert 'omnistage_requests_total{deployment="echo",route="chat.completions",status="completed"} 2.0' in text
    assert 'omnistage_requests_total{deployment="nope",route="chat.completions",status="failed"} 1.0' in text
    assert 'omnistage_time_to_first_packet_seconds_count{deployment="echo-voice",route="chat.completions"} 1.0' in text

    # retention: rows older than the setting go, with their files
    row = InferenceRequest.objects.get(request_id=reply.id)
    path = row.artifacts.get().file.path
    InferenceRequest.objects.filter(pk=row.pk).update(created_at=timezone.now() - timedelta(days=31))
    settings.HISTORY_RETENTION_DAYS = 30
    call_command("inference_cleanup")
    assert not InferenceRequest.objects.filter(pk=row.pk).exists()
    import os

    assert not os.path.exists(path)
    assert InferenceRequest.objects.count() == 3 + 8
