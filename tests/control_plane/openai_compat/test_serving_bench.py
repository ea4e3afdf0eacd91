"""`omnistage bench serve` against the live stack, as a user runs it (a child process with no
Django settings): every request of the echo-voice and tiny omni deployments succeeds, the result
file holds every metric, first audio comes before the end, and the audio seconds it counted are
those of the WAVs the history keeps; a wrong key or model stops it with the server's message and
status 1 (through manage.py too); a server that dies mid-run leaves failures counted and status 2."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from bench_cli import METRICS, bench_argv, bench_serve, client_env, recorded_audio_seconds
from procs import PYTHON, REPO

from control_plane.inference.models import InferenceRequest, Route

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

OMNI = {"stages": {"talker": {"sampling": {"max_tokens": 40}}}}


def test_bench_serve_measures_the_echo_voice_deployment(echo_stack, tmp_path):
    what_the_client_reads(echo_stack)
    chat_text_and_audio_on_echo_voice(echo_stack, tmp_path)
    speech_on_echo_voice(echo_stack, tmp_path)
    wrong_key_and_model(echo_stack, tmp_path)


def test_bench_serve_measures_the_tiny_omni(serving_stack, tiny_omni, tmp_path):
    """The operator's key may read the deployment: its checkpoint's tokenizer gives exact prompt lengths."""
    serving_stack.deploy("omni", "qwen2_5_omni", model_dir=str(tiny_omni), deploy_config=OMNI)
    serving_stack.wait_running("omni", timeout=600)
    run = bench_serve(serving_stack.base, serving_stack.operator_secret, tmp_path, "--model", "omni",
                      "--modalities", "text,audio", "--concurrency", "2", "--num-prompts", "2", "--input-len", "8",
                      "--output-len", "4", "--audio-frames", "20", "--ignore-eos")  # fmt: skip
    assert run.code == 0, run.stderr
    serving_stack.history_written()
    assert "exactly 8 tokens" in run.stdout and "(the deployment's)" in run.stdout
    (level,) = run.levels()
    assert all(level[metric] for metric in METRICS), {metric: level[metric] for metric in METRICS}
    assert set(level["stages"]["stages"]) == {"thinker", "talker", "code2wav"}
    assert run.result["request"]["sampling_params_list"] == [None, {"max_tokens": 20, "ignore_eos": True}, None]
    for request in run.requests():
        assert request["input_len"] == 8 and request["text_tokens"] == 4
        assert request["audio_ttfp_ms"] < request["e2el_ms"]
        assert request["audio_seconds"] == pytest.approx(recorded_audio_seconds(request["request_id"]), abs=1e-4)


def test_bench_serve_counts_the_failures_of_a_server_that_died(serving_stack, tmp_path):
    slow_echo = {"stages": {"echo": {"options": {"delay_s": 0.05, "tokens_per_step": 1}}}}
    serving_stack.deploy("echo", "echo", deploy_config=slow_echo)
    serving_stack.wait_running("echo")
    result_json = tmp_path / "died.json"
    flags = ("--model", "echo", "--concurrency", "2", "--num-prompts", "40", "--input-len", "20", "--warmups", "0")
    bench = subprocess.Popen(bench_argv(serving_stack.base, serving_stack.user_secret, result_json, *flags), cwd=REPO,
                             env=client_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while InferenceRequest.objects.filter(status="completed").count() < 2:  # some answered: kill the server
            assert bench.poll() is None and time.monotonic() < deadline, bench.communicate()
            time.sleep(0.2)
        serving_stack.procs["web"].stop()
        stdout, stderr = bench.communicate(timeout=300)
    finally:
        if bench.poll() is None:
            bench.kill()
        serving_stack.start_web()  # for the fixture's clean-up
    assert bench.returncode == 2, stderr
    (level,) = json.loads(result_json.read_text())["levels"]
    assert level["successful"] >= 2 and level["failed"] >= 1 and level["successful"] + level["failed"] == 40
    assert level["first_error"] and "request(s) failed" in stderr and level["first_error"] in stderr
    assert "Failed requests:" in stdout


def what_the_client_reads(stack):
    """The model's stages in sampling_params_list order; every answer's history row in X-Request-Id."""
    stages = stack.http("GET", "/v1/models/echo-voice").json()["stages"]
    assert [(stage["name"], stage["output"]) for stage in stages] == [("echo", "text"), ("voice", "audio")]
    body = {"model": "echo", "messages": [{"role": "user", "content": "two words"}]}
    answer = stack.http("POST", "/v1/chat/completions", json=body)
    assert answer.headers["x-request-id"] == answer.json()["id"]
    assert stack.http("GET", f"/api/requests/{answer.headers['x-request-id']}/").json()["output_text"] == "two words"
    refused = stack.http("POST", "/v1/chat/completions", json={**body, "n": 3})
    assert refused.status_code == 400 and refused.headers["x-request-id"]


def chat_text_and_audio_on_echo_voice(stack, tmp_path):
    run = bench_serve(stack.base, stack.user_secret, tmp_path, "--model", "echo-voice", "--modalities", "text,audio",
                      "--concurrency", "1", "2", "--num-prompts", "3", "--input-len", "6")  # fmt: skip
    assert run.code == 0, run.stderr
    stack.history_written()
    counts = [(level["concurrency"], level["successful"], level["failed"]) for level in run.levels()]
    assert counts == [(1, 3, 0), (2, 3, 0)]
    for level in run.levels():
        assert all(level[metric] for metric in METRICS), {metric: level[metric] for metric in METRICS}
        assert level["output_tokens"] == 3 * 6  # echo answers each of the six words
        assert set(level["stages"]["stages"]) == {"echo", "voice"}  # per stage, from the history
    for request in run.requests():
        assert request["audio_ttfp_ms"] < request["e2el_ms"]
        assert request["audio_seconds"] == pytest.approx(recorded_audio_seconds(request["request_id"]), abs=1e-4)
        assert request["audio_seconds"] == pytest.approx(6 * 160 / 16000)  # a 10 ms tone a word
    assert "Audio TTFP (ms)" in run.stdout and "voice (ms)" in run.stdout  # the tables


def speech_on_echo_voice(stack, tmp_path):
    run = bench_serve(stack.base, stack.user_secret, tmp_path, "--model", "echo-voice", "--endpoint", "speech",
                      "--concurrency", "2", "--num-prompts", "2", "--input-len", "5", "--warmups", "0")  # fmt: skip
    assert run.code == 0, run.stderr
    stack.history_written()
    for request in run.requests():
        assert request["ok"] and request["audio_ttfp_ms"] < request["e2el_ms"]
        assert request["audio_seconds"] == pytest.approx(recorded_audio_seconds(request["request_id"]), abs=1e-4)
        assert InferenceRequest.objects.get(request_id=request["request_id"]).route == Route.SPEECH


def wrong_key_and_model(stack, tmp_path):
    bad_key = stack.http("GET", "/v1/models/echo", secret="omni-not-a-key").json()["error"]["message"]
    run = bench_serve(stack.base, "omni-not-a-key", tmp_path, "--model", "echo")
    assert run.code == 1 and bad_key in run.stderr and run.result is None

    unknown = stack.http("GET", "/v1/models/nope").json()["error"]["message"]
    run = bench_serve(stack.base, stack.user_secret, tmp_path, "--model", "nope")
    assert run.code == 1 and unknown in run.stderr

    through_manage_py = subprocess.run(
        [PYTHON, "manage.py", "bench", "serve", "--base-url", stack.base, "--api-key", stack.user_secret,
         "--model", "nope"], cwd=REPO, env=stack.env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert through_manage_py.returncode == 1 and unknown in through_manage_py.stderr
