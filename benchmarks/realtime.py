"""Realtime voice sessions over /v1/realtime: N concurrent sessions (1, 4, 16 by default),
each speaking 5 turns in real time under server VAD, against each target deployment.

    .venv/bin/python benchmarks/realtime.py [--targets echo-voice tiny-omni] [--sessions 1 4 16] [--turns 5]
        [--threads 1]
    python3 benchmarks/realtime.py --targets omni-7b-shaped --device cuda --speech-wav hello.wav   # a GPU host

Targets:
- `echo-voice`: the echo stage streaming into a tone "voice" (no model: what the platform
  and the protocol cost);
- `tiny-omni`: the tiny Qwen2.5-Omni (thinker -> talker -> code2wav, random weights, built
  with `stages.tiny` unless `--omni-model-dir` names one), replies kept short by the
  deployment's per-stage sampling (thinker max_tokens 8, talker max_tokens 40 codes);
- `omni-7b-shaped`: the same pipeline and sampling over the real-shape directory `qwen2_5_omni_7b`
  (`python -m stages.tiny --real-shapes`: Qwen2.5-Omni-7B's published configs, no weights) deployed
  with `load_format: dummy`: each replica host builds its stage on the GPU with seeded random
  weights, nothing is written or read; it needs `--device cuda`;
- `omni-7b-grouped`: the same with the three stages in one stage group (one replica host process,
  docs/stage-groups.md).

`--device cuda` puts every stage of the omni targets on the GPU (thinker and talker in bf16 with
CUDA graphs, code2wav in float32, batches up to 16). `--deploy-override JSON` is merged into every
target's DeployConfig (e.g. `'{"stages": {"code2wav": {"gpu_sms": 112}}}'`).

`--threads` (default 1) sets OMP_NUM_THREADS for the platform's processes, the replica hosts
included: each replica host otherwise takes torch's default of one thread per core, and the
omni deployment's three replica processes then oversubscribe a small machine (on 2 cores,
the tiny omni's TTFP through serve() was 4.5x longer with `--threads 0`).

Starts its own redis-server, Celery worker, orchestrator and daphne on a scratch SQLite
database. Speech is espeak-ng's "hello, how are you" (or the WAV `--speech-wav` names, for
hosts without espeak-ng) trimmed to its voiced samples, streamed in 100 ms appends at 1x real
time, then silence until the answer is done.
Per turn, at the client:
- after end of speech: from sending the append that carries the turn's last speech sample
  to the first `response.output_audio.delta`. It includes the server VAD's silence window
  (`--silence-ms`) that must pass before a turn ends;
- after speech_stopped: from receiving the server's `input_audio_buffer.speech_stopped` to
  the first `response.output_audio.delta`;
- RTF: response.created -> response.done, over the seconds of audio received.
"Held" counts the sessions that did every turn with no `error` event and no failure. A last line per
row gives the p50 after speech_stopped of each turn (1, 2, ...: later turns carry more history).
The baseline, measured in the same run: `serve()` straight to the orchestrator with the
same prompt and sampling, time to the first audio chunk (TTFP), N requests at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from client.bench.realtime import ANSWER_TIMEOUT_S, CHUNK_MS, RATE, Session, Turn, connect, speech_samples  # noqa: E402


@dataclass(frozen=True)
class Target:
    pipeline: str
    deploy_config: dict
    checkpoint: str | None = None  # a stages.tiny checkpoint the target needs, or a real-shape one
    real_shape: bool = False  # configs only (stages.tiny --real-shapes), every stage with load_format dummy


SEVEN_B_SHAPED = "qwen2_5_omni_7b"  # the real-shape directory (needs a GPU)
SHORT_REPLIES = {"stages": {"thinker": {"sampling": {"max_tokens": 8}}, "talker": {"sampling": {"max_tokens": 40}}}}


def grouped(config: dict) -> dict:
    """`config` with thinker, talker and code2wav in one stage group (one replica host process)."""
    stages = {name: {**config["stages"].get(name, {}), "group": "omni"} for name in ("thinker", "talker", "code2wav")}
    return {**config, "stages": stages}


TARGETS = {
    "echo-voice": Target("echo-voice", {}),
    "tiny-omni": Target("qwen2_5_omni", SHORT_REPLIES, checkpoint="qwen2_5_omni"),
    "omni-7b-shaped": Target("qwen2_5_omni", SHORT_REPLIES, checkpoint=SEVEN_B_SHAPED, real_shape=True),
    "omni-7b-grouped": Target("qwen2_5_omni", grouped(SHORT_REPLIES), checkpoint=SEVEN_B_SHAPED, real_shape=True),
}
GPU_STAGES = {
    "thinker": {"dtype": "bfloat16", "kv_memory_mb": 8192},
    "talker": {"dtype": "bfloat16", "kv_memory_mb": 4096},
    "code2wav": {"dtype": "float32"},
}


def deploy_config_for(target: Target, device: str) -> dict:
    """The target's DeployConfig with every stage of a model pipeline on `device`."""
    if target.checkpoint is None or device == "cpu":
        return target.deploy_config
    load_format = {"load_format": "dummy"} if target.real_shape else {}
    stages = {
        name: {
            **GPU_STAGES[name],
            "device": device,
            "max_batch": 16,
            **load_format,
            **target.deploy_config["stages"].get(name, {}),
        }
        for name in GPU_STAGES
    }
    return {**target.deploy_config, "stages": stages}


def queueing(config: dict, pipeline_name: str) -> dict:
    """`config` with every stage of the pipeline queueing what the sessions send instead of refusing it."""
    from control_plane.deployments.models import Pipeline

    names = [stage["name"] for stage in Pipeline.objects.get(name=pipeline_name).config["stages"]]
    stages = {name: {"max_waiting": 4096, **config.get("stages", {}).get(name, {})} for name in names}
    return {**config, "stages": stages}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# ---------------------------------------------------------------------- set-up


def model_dir_for(target: Target, scratch: Path, omni_model_dir: str | None) -> str:
    if target.checkpoint is None:
        return "-"
    if omni_model_dir:
        return omni_model_dir
    models = scratch / "models"
    if target.real_shape:
        print(f"writing the real-shape configs {target.checkpoint} (weights: load_format dummy) ...", file=sys.stderr)
    real_shapes = ["--real-shapes"] if target.real_shape else []
    subprocess.run([sys.executable, "-m", "stages.tiny", str(models), *real_shapes, "--only", target.checkpoint],
                   cwd=REPO, check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    return str(models / target.checkpoint)


@dataclass
class Platform:
    redis_server: object
    procs: list
    base: str
    secret: str
    logs: Path

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()
        self.redis_server.stop()

    def web_traceback(self) -> str:
        log = (self.logs / "web.log").read_text()
        return log[log.find("Traceback") :][:9000] if "Traceback" in log else "no traceback in the web log"


def start_platform(var_dir: Path, threads: int) -> Platform:
    from procs import PYTHON, Proc, RedisServer, free_port, wait_for

    redis_server = RedisServer(var_dir / "redis").start()
    port = free_port()
    env = {
        **os.environ,
        "OMNISTAGE_VAR_DIR": str(var_dir),
        "REDIS_URL": redis_server.url,
        "OMNISTAGE_HEARTBEAT_INTERVAL": "0.5",
        "OMNISTAGE_HEARTBEAT_TTL": os.environ.get("OMNISTAGE_HEARTBEAT_TTL", "3"),
        "DJANGO_SETTINGS_MODULE": "control_plane.settings",
    }
    env.pop("DATABASE_URL", None)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))  # inherited by the replica hosts
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
    user = get_user_model().objects.create_user("bench", password="x")
    _, secret = api_key_create(user=user, name="bench", scopes=["inference"])
    import httpx

    wait_for(lambda: httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200, timeout=60, what="web up")
    return Platform(redis_server, procs, f"ws://127.0.0.1:{port}", secret, logs)


def deploy(name: str, target: Target, model_dir: str, device: str, override: dict | None = None):
    from platform_serve import merged

    from control_plane.deployments.models import Deployment, Pipeline
    from control_plane.deployments.services import deployment_create

    config = merged({**deploy_config_for(target, device), "max_queue": 4096}, override or {})
    deployment = deployment_create(
        name=name, pipeline=Pipeline.objects.get(name=target.pipeline), model_dir=model_dir,
        deploy_config=queueing(config, target.pipeline),
    )  # fmt: skip
    deadline = time.monotonic() + 900
    while (state := Deployment.objects.get(pk=deployment.pk).state) != "RUNNING":
        errors = [(r.stage, r.last_error) for r in deployment.replicas.all() if r.last_error]
        if state == "ERROR" or errors or time.monotonic() > deadline:
            raise SystemExit(f"{name} did not reach RUNNING (state {state}, replica errors {errors})")
        time.sleep(0.5)
    return Deployment.objects.select_related("pipeline").get(pk=deployment.pk)


# ---------------------------------------------------------------------- baseline


def prompt_of(speech: np.ndarray, family: str) -> list[dict]:
    from control_plane.realtime.conversation import Item, Part, prompt_messages
    from stages.resampling import resample

    item = Item(id="bench", role="user", parts=[Part(type="input_audio", samples=resample(speech, RATE, 16000))])
    return prompt_messages([item], "", family)


async def baseline(deployment, redis_url: str, messages: list[dict], concurrent: int) -> list[float]:
    """Time to the first audio chunk through serve(), the path under the realtime API, with the
    sampling a realtime response of a default session gives each stage."""
    import redis.asyncio

    from control_plane.orchestrator.serving import serve
    from control_plane.realtime.sampling import entry_sampling, later_sampling
    from stages.config import load_deploy_config, load_pipeline_config
    from stages.protocol import StageRequest

    pipeline = load_pipeline_config(deployment.pipeline.config)
    deploy_config = load_deploy_config(deployment.deploy_config, pipeline)
    client = redis.asyncio.Redis.from_url(redis_url, max_connections=concurrent + 16)

    async def one() -> float:
        sampling = entry_sampling(pipeline, deploy_config, "inf", None)
        request = StageRequest(request_id=uuid.uuid4().hex, messages=messages, sampling=sampling)
        started, first = time.perf_counter(), None
        async for message in serve(str(deployment.id), request, later_sampling(pipeline, deploy_config, "inf"),
                                   client=client):  # fmt: skip
            if message.kind == "output" and "audio" in message.output.payloads and first is None:
                first = time.perf_counter() - started
            if message.kind == "fail":
                raise RuntimeError(message.error.message)
        return first if first is not None else float("nan")

    try:
        return list(await asyncio.gather(*(one() for _ in range(concurrent))))
    finally:
        await client.aclose()


# ---------------------------------------------------------------------- sessions


@dataclass
class Figures:
    after_speech: list[float] = field(default_factory=list)
    after_stop_by_turn: dict[int, list[float]] = field(default_factory=dict)
    """turn index -> after speech_stopped; turn 0's prompt holds one user clip, as the baseline's."""
    rtf: list[float] = field(default_factory=list)

    @property
    def after_stop(self) -> list[float]:
        return [value for times in self.after_stop_by_turn.values() for value in times]

    def add(self, turn: Turn, index: int) -> None:
        self.after_speech.append(turn.first_audio - turn.end_of_speech)
        if turn.speech_stopped is not None:
            self.after_stop_by_turn.setdefault(index, []).append(turn.first_audio - turn.speech_stopped)
        audio_s = turn.audio_bytes / 2 / RATE
        if audio_s > 0 and turn.created is not None:
            self.rtf.append((turn.done - turn.created) / audio_s)


async def one_session(base: str, secret: str, model: str, speech, turns: int, silence_ms: int, figures: Figures):
    """True when the session did every turn without an error."""
    async with connect(base, secret, model) as ws:
        session = Session(ws, silence_ms)
        await session.configure()
        reading = asyncio.create_task(session.read())
        try:
            for index in range(turns):
                turn = await session.speak(speech)
                if turn.first_audio is None or turn.done is None:
                    session.errors.append(turn.error or f"a turn got no audio answer within {ANSWER_TIMEOUT_S} s")
                    continue
                figures.add(turn, index)
        finally:
            reading.cancel()
    for error in session.errors:
        print("session error:", error, file=sys.stderr)
    return not session.errors


async def concurrent_sessions(base, secret, model, speech, count: int, turns: int, silence_ms: int):
    figures = Figures()
    started = time.perf_counter()
    results = await asyncio.gather(
        *(one_session(base, secret, model, speech, turns, silence_ms, figures) for _ in range(count)),
        return_exceptions=True,
    )
    for result in results:
        if isinstance(result, BaseException):
            print(f"a session failed: {type(result).__name__}: {result}", file=sys.stderr)
    return figures, sum(1 for result in results if result is True), time.perf_counter() - started


# ---------------------------------------------------------------------- report


@dataclass
class Row:
    target: str
    sessions: int
    baseline: list[float]
    figures: Figures
    held: int
    wall_s: float


def ms(value: float) -> str:
    return f"{value * 1000:7.0f}"


def report(rows: list[Row], speech: np.ndarray, args) -> None:
    turns, silence_ms = args.turns, args.silence_ms
    threads = f"{args.threads} torch thread(s) per process" if args.threads else "torch's default threads"
    print(f"\non {args.device}; {turns} turns per session; {threads}; speech {speech.size / RATE:.2f} s streamed at 1x in {CHUNK_MS} ms appends; "
          f"server VAD silence window {silence_ms} ms")  # fmt: skip
    print("first audio delta after: (A) the append carrying the last speech sample was sent; "
          "(B) the server's speech_stopped was received")  # fmt: skip
    print("(B) of turn 1 against serve()'s TTFP: both prompts hold one user clip; later turns carry the history")
    print("target         sessions | (A) p50 / p95 ms  | (B) p50 / p95 ms  | (B) turn 1 p50 ms | serve() TTFP p50 ms "
          "| ratio | RTF p50 | held  | wall s")  # fmt: skip
    for row in rows:
        f = row.figures
        base_p50, first_p50 = percentile(row.baseline, 0.5), percentile(f.after_stop_by_turn.get(0, []), 0.5)
        print(f"{row.target:14s} {row.sessions:5d} | {ms(percentile(f.after_speech, 0.5))} / "
              f"{ms(percentile(f.after_speech, 0.95))} | {ms(percentile(f.after_stop, 0.5))} / "
              f"{ms(percentile(f.after_stop, 0.95))} | {ms(first_p50):>17s} | {ms(base_p50):>19s} | "
              f"{first_p50 / base_p50:4.2f}x | {percentile(f.rtf, 0.5):7.2f} | {row.held:2d}/{row.sessions:<2d} | "
              f"{row.wall_s:6.1f}")  # fmt: skip
    for row in rows:
        by_turn = sorted(row.figures.after_stop_by_turn.items())
        print(
            f"{row.target:14s} {row.sessions:5d} | (B) p50 ms by turn: "
            + ", ".join(f"{index + 1}: {ms(percentile(times, 0.5)).strip()}" for index, times in by_turn)
        )


def measure(platform: Platform, name: str, deployment, speech, args) -> list[Row]:
    messages = prompt_of(speech, deployment.pipeline.config["family"])
    redis_url = platform.redis_server.url
    asyncio.run(baseline(deployment, redis_url, messages, 2))  # warm up
    rows = []
    for count in args.sessions:
        base_times = asyncio.run(baseline(deployment, redis_url, messages, count))
        figures, held, wall = asyncio.run(
            concurrent_sessions(platform.base, platform.secret, name, speech, count, args.turns, args.silence_ms)
        )
        rows.append(Row(name, count, base_times, figures, held, wall))
        print(f"{name}: {count} sessions done in {wall:.1f} s, {held}/{count} held", file=sys.stderr)
        if held < count:
            print(platform.web_traceback(), file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", nargs="+", choices=sorted(TARGETS), default=["echo-voice", "tiny-omni"])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--silence-ms", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads per process (OMP_NUM_THREADS); 0: torch's default, every core")  # fmt: skip
    parser.add_argument(
        "--omni-model-dir", help="a Qwen2.5-Omni checkpoint for the omni target (default: build the target's one)"
    )
    parser.add_argument("--device", default="cpu", help="the omni targets' device: cpu, cuda or cuda:N")
    parser.add_argument("--speech-wav", help="the user's speech as a WAV file (default: espeak-ng's)")
    parser.add_argument(
        "--deploy-override",
        type=json.loads,
        default={},
        metavar="JSON",
        help='merged into every target\'s DeployConfig, e.g. \'{"stages": {"code2wav": {"gpu_sms": 112}}}\'',
    )
    parser.add_argument(
        "--keep-logs",
        type=Path,
        help="copy the platform's logs here (web, orchestrator, worker with its replica hosts)",
    )
    args = parser.parse_args()
    if args.device == "cpu" and any(TARGETS[name].real_shape for name in args.targets):
        raise SystemExit("omni-7b-shaped needs --device cuda")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        speech = speech_samples(args.speech_wav)
        platform = start_platform(scratch, args.threads)
        try:
            for name in args.targets:
                target = TARGETS[name]
                model_dir = model_dir_for(target, scratch, args.omni_model_dir)
                deployment = deploy(name, target, model_dir, args.device, args.deploy_override)
                rows += measure(platform, name, deployment, speech, args)
        except BaseException:
            for log in ("web.log", "worker.log", "orchestrator.log"):
                print(f"--- {log}:\n" + (platform.logs / log).read_text()[-4000:])
            raise
        finally:
            platform.stop()
            if args.keep_logs:
                shutil.copytree(platform.logs, args.keep_logs, dirs_exist_ok=True)
    report(rows, speech, args)


if __name__ == "__main__":
    main()
