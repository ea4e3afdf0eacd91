"""Stage groups vs one replica host per stage, through the platform path, in one run.

One platform (`benchmarks/platform_serve.py`'s: `manage.py omni_up` over a scratch var dir) serves
the same model twice: `split`, every stage its own replica host process (stages hand over through
the orchestrator and Redis), and `grouped`, every stage in one stage group (one process; the
stages hand over in memory). `bench serve` measures both through /v1 at each concurrency in turn
(split, then grouped, then the next concurrency: a load that drifts during the run hits both
alike), and the ratios grouped / split are printed at the end. Failed requests are counted, not fatal.

    .venv/bin/python benchmarks/colocate.py                                    # the tiny omni, this CPU
    python3 benchmarks/colocate.py --device cuda --target qwen2_5_omni_7b --concurrency 1 4 \\
        -- --input-len 128 --output-len 128 --audio-frames 512 --ignore-eos     # the H200

Everything after `--` goes to `bench serve`. With $OUT set, each deployment's results go to
$OUT/colocate_<name>_c<N>.json and the platform's log to $OUT/platform_colocate.log.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "benchmarks"), str(REPO / "tests")]

from platform_serve import TARGETS, Platform, Target, deploy_config, merged, model_dir  # noqa: E402

GROUP = "pipeline"
FIGURES = (  # (label, the level's key, its distribution's field or None, how the value prints)
    ("TTFP mean", "audio_ttfp_ms", "mean", "{:.0f} ms"),
    ("RTF mean", "audio_rtf", "mean", "{:.3f}"),
    ("TTFT mean", "ttft_ms", "mean", "{:.0f} ms"),
    ("E2EL mean", "e2el_ms", "mean", "{:.0f} ms"),
    ("req/s", "request_throughput", None, "{:.3f}"),
)


def grouped(config: dict) -> dict:
    """The same deployment with every stage in one stage group."""
    stages = {name: {**settings, "group": GROUP} for name, settings in config["stages"].items()}
    return {**config, "stages": stages}


def deploy(platform: Platform, name: str, target: Target, config: dict) -> None:
    body = {"name": name, "pipeline": target.pipeline, "model_dir": config.pop("_model_dir"), "deploy_config": config}
    print(f"[colocate] {name}: deploy_config {json.dumps(config)}", flush=True)
    response = platform.http("POST", "/api/deployments/", json=body)
    if response.status_code != 201:
        raise SystemExit(f"{name} was refused: {response.status_code} {response.text}")


def wait_running(platform: Platform, names: list[str], timeout_s: float) -> None:
    started = time.monotonic()
    for name in names:
        while True:
            body = platform.http("GET", f"/api/deployments/{name}/").json()
            if body["state"] == "RUNNING":
                print(f"[colocate] {name} RUNNING after {time.monotonic() - started:.1f} s", flush=True)
                break
            errors = [f"{r['stage']}: {r['last_error']}" for r in body["replicas"] if r["last_error"]]
            if body["state"] == "ERROR" or errors or time.monotonic() - started > timeout_s:
                raise SystemExit(f"{name} did not reach RUNNING ({body['state']}: {body['state_reason']}; "
                                 f"replica errors: {errors or 'none'})\n{platform.log_tail()}")  # fmt: skip
            time.sleep(1.0)


def measure(platform: Platform, name: str, target: Target, concurrency: list[int], bench_args: list[str],
            result: Path) -> list[dict]:  # fmt: skip
    from client.bench.options import ServeOptions, add_serve_arguments
    from client.bench.serve import run

    parser = argparse.ArgumentParser(prog="bench serve")
    add_serve_arguments(parser)
    argv = ["--base-url", platform.base, "--api-key", platform.key, "--model", name, "--concurrency",
            *map(str, concurrency), "--no-progress", "--result-json", str(result), *target.bench, *bench_args]  # fmt: skip
    print(f"[colocate] {name}: bench serve {' '.join(shlex.quote(a) for a in argv[4:])}", flush=True)
    code = run(ServeOptions.from_mapping(vars(parser.parse_args(argv))))
    if not result.exists():
        raise SystemExit(f"bench serve on {name} exited {code} without results")
    return json.loads(result.read_text())["levels"]


def one_level(bench_args: list[str], index: int) -> list[str]:
    """`bench serve`'s flags for the index-th concurrency level alone: a flag that gives one value
    per level (`--num-prompts 4 16 32`) keeps that level's value."""
    kept, position = [], 0
    while position < len(bench_args):
        flag = bench_args[position]
        values = []
        while position + 1 + len(values) < len(bench_args) and not bench_args[position + 1 + len(values)].startswith(
            "--"
        ):
            values.append(bench_args[position + 1 + len(values)])
        kept += [flag, values[index]] if flag == "--num-prompts" and len(values) > 1 else [flag, *values]
        position += 1 + len(values)
    return kept


def figure(level: dict, key: str, field: str | None) -> float | None:
    value = level.get(key)
    if field is not None:
        value = value.get(field) if isinstance(value, dict) else None
    return value


def ratio_table(split: list[dict], group: list[dict]) -> str:
    lines = ["", "grouped (one process, in-memory hand-over) vs split (one process per stage), same run:",
             f"{'concurrency':>11}  {'figure':<10} {'split':>12} {'grouped':>12} {'grouped/split':>14}"]  # fmt: skip
    for one, other in zip(split, group, strict=True):
        lines.append(f"{one['concurrency']:>11}  {'failed':<10} {one['failed']:>12} {other['failed']:>12}")
        for label, key, field, shown in FIGURES:
            a, b = figure(one, key, field), figure(other, key, field)
            if a is None or b is None:
                continue
            ratio = f"{b / a:.2f}x" if a else "-"
            lines.append(
                f"{one['concurrency']:>11}  {label:<10} {shown.format(a):>12} {shown.format(b):>12} {ratio:>14}"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", choices=sorted(name for name in TARGETS if "omni" in name), default="tiny-omni")
    parser.add_argument("--device", default="cpu", help="every stage's device: cpu, cuda or cuda:N")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--deploy-timeout", type=float, default=900, help="seconds to wait for RUNNING")
    parser.add_argument("--deploy-override", type=json.loads, default={}, metavar="JSON",
                        help="merged into both deployments' DeployConfig")  # fmt: skip
    args, bench_args = parser.parse_known_args()
    bench_args = [a for a in bench_args if a != "--"]
    target = TARGETS[args.target]
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    with tempfile.TemporaryDirectory(prefix="omnistage-colocate-") as scratch:
        var_dir = Path(scratch)
        platform = Platform(var_dir, "cpu" if args.device == "cpu" else "gpu")
        try:
            model = model_dir(target, var_dir)
            platform.start()
            pipeline = platform.http("GET", f"/api/pipelines/{target.pipeline}/").json()["config"]
            split_config = merged(deploy_config(target, args.device, pipeline), args.deploy_override)
            configs = {"split": split_config, "grouped": grouped(split_config)}
            for name, config in configs.items():
                deploy(platform, name, target, {**config, "_model_dir": model})
            wait_running(platform, list(configs), args.deploy_timeout)
            levels: dict[str, list[dict]] = {name: [] for name in configs}
            for index, concurrency in enumerate(args.concurrency):
                for name in configs:
                    result = (out or var_dir) / f"colocate_{name}_c{concurrency}.json"
                    level_args = one_level(bench_args, index)
                    levels[name] += measure(platform, name, target, [concurrency], level_args, result)
            print(ratio_table(levels["split"], levels["grouped"]), flush=True)
        finally:
            platform.stop()
            if out is not None:
                (out / "platform_colocate.log").write_text(platform.log_tail(2_000_000))
    return 0


if __name__ == "__main__":
    sys.exit(main())
