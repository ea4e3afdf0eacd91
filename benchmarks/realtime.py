"""Realtime voice sessions over /v1/realtime: N concurrent sessions (1, 4, 16 by default),
each speaking 5 turns in real time under server VAD.

    .venv/bin/python benchmarks/realtime.py [--sessions 1 4 16] [--turns 5]
        [--pipeline echo-voice --model-dir -]            # or: --pipeline qwen2_5_omni --model-dir var/models/qwen2_5_omni

Starts its own redis-server, Celery worker, orchestrator and daphne on a scratch SQLite
database. Per turn it measures, at the client:
- first audio after end of speech: from the last speech sample sent (audio is streamed at
  1x real time, then silence) to the first `response.output_audio.delta`; this includes
  the VAD's silence window (`--silence-ms`), printed alongside;
- first audio after speech_stopped: from the server's `speech_stopped` to the first delta;
- RTF: response.created -> response.done time over the seconds of audio received.
The baseline, measured in the same run: `serve()` straight to the orchestrator with the
same prompt, time to the first audio chunk (TTFP), one request at a time and N at once.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import wave
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
CHUNK_MS = 100
RATE = 24000


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def speech_samples(scratch: Path) -> np.ndarray:
    """'hello, how are you' from espeak-ng at 24 kHz, or a 1.2 s voiced buzz without it."""
    from control_plane.realtime.resampling import resample

    if shutil.which("espeak-ng"):
        path = scratch / "hello.wav"
        subprocess.run(["espeak-ng", "-w", str(path), "hello, how are you"], check=True, capture_output=True)
        with wave.open(str(path), "rb") as reader:
            rate = reader.getframerate()
            pcm = np.frombuffer(reader.readframes(reader.getnframes()), dtype="<i2")
        samples = resample(pcm.astype(np.float32) / 32768.0, rate, RATE)
        voiced = np.flatnonzero(np.abs(samples) > 0.01)
        return samples[voiced[0] : voiced[-1] + 1]  # the end of speech is the end of the samples
    t = np.arange(int(1.2 * RATE)) / RATE
    return (0.3 * np.sign(np.sin(2 * np.pi * 140 * t))).astype(np.float32)


def start_platform(var_dir: Path, pipeline: str, model_dir: str):
    from procs import PYTHON, Proc, RedisServer, free_port, wait_for

    redis_server = RedisServer(var_dir / "redis").start()
    port = free_port()
    env = {
        **os.environ,
        "OMNISTAGE_VAR_DIR": str(var_dir),
        "REDIS_URL": redis_server.url,
        "OMNISTAGE_HEARTBEAT_INTERVAL": "0.5",
        "OMNISTAGE_HEARTBEAT_TTL": "3",
        "DJANGO_SETTINGS_MODULE": "control_plane.settings",
    }
    env.pop("DATABASE_URL", None)
    os.environ.update({k: env[k] for k in ("OMNISTAGE_VAR_DIR", "REDIS_URL", "DJANGO_SETTINGS_MODULE")})
    os.environ.pop("DATABASE_URL", None)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from control_plane.accounts.services import api_key_create

    call_command("migrate", verbosity=0)
    call_command("sync_pipelines", verbosity=0)
    logs = var_dir / "logs"
    logs.mkdir()
    procs = [
        Proc([PYTHON, "-m", "celery", "-A", "control_plane", "worker", "-Q", "cpu", "-c", "1", "--without-mingle",
              "--without-gossip", "-l", "WARNING"], env, logs / "worker.log"),
        Proc([PYTHON, "manage.py", "orchestrator"], env, logs / "orchestrator.log"),
        Proc([PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "control_plane.asgi:application"], env,
             logs / "web.log"),
    ]  # fmt: skip
    from control_plane.deployments.models import Deployment, Pipeline
    from control_plane.deployments.services import deployment_create

    user = get_user_model().objects.create_user("bench", password="x")
    _, secret = api_key_create(user=user, name="bench", scopes=["inference"])
    deployment = deployment_create(
        name="bench-voice", pipeline=Pipeline.objects.get(name=pipeline), model_dir=model_dir,
        deploy_config={"max_queue": 4096},
    )  # fmt: skip
    wait_for(
        lambda: Deployment.objects.get(pk=deployment.pk).state == "RUNNING", timeout=600, what="deployment RUNNING"
    )
    import httpx

    base = f"ws://127.0.0.1:{port}"
    wait_for(lambda: httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200, timeout=60, what="web up")
    return redis_server, procs, deployment, base, secret


# ---------------------------------------------------------------------- baseline


async def baseline(deployment, redis_url: str, messages: list[dict], concurrent: int, max_tokens) -> list[float]:
    """Time to the first audio chunk through serve(), the path under the realtime API."""
    import redis.asyncio

    from control_plane.orchestrator.serving import serve
    from stages.config import load_pipeline_config
    from stages.protocol import SamplingParams, StageRequest

    client = redis.asyncio.Redis.from_url(redis_url, max_connections=concurrent + 16)
    pipeline = load_pipeline_config(deployment.pipeline.config)
    later = {  # as the realtime API bounds the later AR stages (the talker)
        stage.name: SamplingParams(**{**stage.default_sampling, "max_tokens": max_tokens})
        for stage in pipeline.stages
        if stage.kind == "ar" and stage.id != pipeline.entry_stage.id
    }

    async def one() -> float:
        sampling = SamplingParams(**{**pipeline.entry_stage.default_sampling, "max_tokens": max_tokens})
        request = StageRequest(request_id=uuid.uuid4().hex, messages=messages, sampling=sampling)
        started, first = time.perf_counter(), None
        async for message in serve(str(deployment.id), request, later, client=client):
            if message.kind == "output" and "audio" in message.output.payloads and first is None:
                first = time.perf_counter() - started
            if message.kind == "fail":
                raise RuntimeError(message.error.message)
        return first if first is not None else float("nan")

    times = await asyncio.gather(*(one() for _ in range(concurrent)))
    await client.aclose()
    return list(times)


# ---------------------------------------------------------------------- sessions


class TurnTimes:
    def __init__(self):
        self.after_speech: list[float] = []
        self.after_stop: list[float] = []
        self.rtf: list[float] = []


async def session(
    base: str, secret: str, speech: np.ndarray, turns: int, silence_ms: int, max_tokens, times: TurnTimes
) -> bool:
    """One session speaking `turns` turns in real time; True when it ran without an error event."""
    from websockets.asyncio.client import connect

    chunk = RATE * CHUNK_MS // 1000
    quiet = np.zeros(chunk, dtype=np.float32)

    def b64(samples: np.ndarray) -> str:
        return base64.b64encode((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()).decode()

    headers = {"Authorization": f"Bearer {secret}"}
    async with connect(f"{base}/v1/realtime?model=bench-voice", additional_headers=headers, max_size=None) as ws:
        detection = {"type": "server_vad", "silence_duration_ms": silence_ms, "prefix_padding_ms": 200}
        await ws.send(
            json.dumps({"type": "session.update", "session": {"audio": {"input": {"turn_detection": detection}}}})
        )
        errors = 0
        state = {"stopped": None, "first": None, "created": None, "done": None, "audio_bytes": 0}

        async def reader():
            nonlocal errors
            async for raw in ws:
                event = json.loads(raw)
                kind, now = event["type"], time.perf_counter()
                if kind == "error":
                    errors += 1
                    print("error event:", event["error"], file=sys.stderr)
                elif kind == "input_audio_buffer.speech_stopped":
                    state["stopped"] = now
                elif kind == "response.created":
                    state["created"] = now
                elif kind == "response.output_audio.delta":
                    state["first"] = state["first"] or now
                    state["audio_bytes"] += len(event["delta"]) * 3 // 4
                elif kind == "response.done":
                    state["done"] = now

        reading = asyncio.create_task(reader())
        try:
            for _ in range(turns):
                for key in state:
                    state[key] = 0 if key == "audio_bytes" else None
                clock = time.perf_counter()
                for start in range(0, speech.size, chunk):  # speak at 1x real time
                    await ws.send(
                        json.dumps({"type": "input_audio_buffer.append", "audio": b64(speech[start : start + chunk])})
                    )
                    clock += CHUNK_MS / 1000
                    await asyncio.sleep(max(0.0, clock - time.perf_counter()))
                end_of_speech = time.perf_counter()
                deadline = end_of_speech + 120
                while state["done"] is None and time.perf_counter() < deadline:  # then silence, until answered
                    await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": b64(quiet)}))
                    clock += CHUNK_MS / 1000
                    await asyncio.sleep(max(0.0, clock - time.perf_counter()))
                if state["first"] is None or state["done"] is None:
                    errors += 1
                    print(f"a turn got no answer within 120 s: {state}", file=sys.stderr)
                    continue
                times.after_speech.append(state["first"] - end_of_speech)
                if state["stopped"] is not None:
                    times.after_stop.append(state["first"] - state["stopped"])
                audio_s = state["audio_bytes"] / 2 / RATE
                if audio_s > 0 and state["created"] is not None:
                    times.rtf.append((state["done"] - state["created"]) / audio_s)
        finally:
            reading.cancel()
    return errors == 0


async def sessions(base: str, secret: str, speech, count: int, turns: int, silence_ms: int, max_tokens):
    times = TurnTimes()
    started = time.perf_counter()
    results = await asyncio.gather(
        *(session(base, secret, speech, turns, silence_ms, max_tokens, times) for _ in range(count)),
        return_exceptions=True,
    )
    wall = time.perf_counter() - started
    held = sum(1 for result in results if result is True)
    for result in results:
        if isinstance(result, BaseException):
            print(f"a session failed: {type(result).__name__}: {result}", file=sys.stderr)
    return times, held, wall


def ms(value: float) -> str:
    return f"{value * 1000:8.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--silence-ms", type=int, default=300)
    parser.add_argument("--pipeline", default="echo-voice")
    parser.add_argument("--model-dir", default="-")
    parser.add_argument("--max-output-tokens", default="inf", help="per response; bounds every AR stage (omni: 32)")
    args = parser.parse_args()
    max_tokens = args.max_output_tokens if args.max_output_tokens == "inf" else int(args.max_output_tokens)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        speech = speech_samples(Path(scratch))
        redis_server, procs, deployment, base, secret = start_platform(Path(scratch), args.pipeline, args.model_dir)
        from control_plane.realtime.conversation import Item, Part, prompt_messages
        from control_plane.realtime.resampling import resample

        item = Item(id="bench", role="user", parts=[Part(type="input_audio", samples=resample(speech, RATE, 16000))])
        messages = prompt_messages([item], "", deployment.pipeline.config["family"])
        baseline_tokens = 64 if max_tokens == "inf" else max_tokens
        try:
            asyncio.run(baseline(deployment, redis_server.url, messages, 2, baseline_tokens))  # warm up
            for count in args.sessions:
                base_times = asyncio.run(baseline(deployment, redis_server.url, messages, count, baseline_tokens))
                times, held, wall = asyncio.run(
                    sessions(base, secret, speech, count, args.turns, args.silence_ms, max_tokens)
                )
                rows.append((count, base_times, times, held, wall))
                if held < count:
                    log = (Path(scratch) / "logs" / "web.log").read_text()
                    print(
                        log[log.find("Traceback") :][:9000] if "Traceback" in log else "no traceback", file=sys.stderr
                    )
        except BaseException:
            print((Path(scratch) / "logs" / "web.log").read_text()[-5000:])
            raise
        finally:
            for proc in procs:
                proc.stop()
            redis_server.stop()
    print(f"{args.pipeline}: {args.turns} turns per session, speech {speech.size / RATE:.2f} s streamed at 1x, "
          f"VAD silence window {args.silence_ms} ms")  # fmt: skip
    print("sessions | first audio after end of speech p50/p95 ms | after speech_stopped p50/p95 ms | "
          "serve() TTFP p50 ms (baseline) | ratio | RTF p50 | held")  # fmt: skip
    for count, base_times, times, held, _ in rows:
        base_p50 = percentile(base_times, 0.5)
        after_stop = percentile(times.after_stop, 0.5)
        print(
            f"{count:8d} | {ms(percentile(times.after_speech, 0.5))} / {ms(percentile(times.after_speech, 0.95))}"
            f"             | {ms(after_stop)} / {ms(percentile(times.after_stop, 0.95))}"
            f"          | {ms(base_p50)}                    | {after_stop / base_p50:5.2f}x"
            f" | {percentile(times.rtf, 0.5):7.2f} | {held}/{count}"
        )


if __name__ == "__main__":
    main()
