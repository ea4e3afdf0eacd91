"""Where a web process's time goes: py-spy records every web process while a load runs.

    .venv/bin/python benchmarks/profile_web.py [--path chat|sse|health|models] [--concurrency 40]
        [--seconds 10] [--idle] [--process web|history|orchestrator] [--py-spy PATH] [--out DIR]

Starts the same private platform as benchmarks/serving.py (echo deployment), warms it, then
runs the load for `--seconds` while `py-spy record --format raw` samples each web process
(with `--idle`, also waiting threads: wall-clock time; without, only what holds the GIL: CPU).
Prints benchmarks/stack_split.py's summary of each recording. py-spy is not a dependency
(`pip install py-spy`, or pass its path).
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
from pathlib import Path

from http_load import expect_status, load
from live_platform import DEFAULT_POSTGRES, LivePlatform
from serving import ECHO_OPTIONS, prompt


def request_of(path: str, secret: str) -> tuple[str, str, bytes, dict[str, str]]:
    auth = {"Authorization": f"Bearer {secret}"}
    if path in ("chat", "sse"):
        body = {"model": "bench-echo", "messages": [{"role": "user", "content": prompt(8)}], "stream": path == "sse"}
        return "POST", "/v1/chat/completions", json.dumps(body).encode(), {**auth, "Content-Type": "application/json"}
    if path == "models":
        return "GET", "/v1/models", b"", auth
    return "GET", "/health", b"", {}


async def run_for(platform: LivePlatform, request, concurrency: int, seconds: float) -> int:
    method, path, body, headers = request
    done = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        latencies, _ = await load("127.0.0.1", platform.port, method, path, total=concurrency * 5,
                                  concurrency=concurrency, body=body, headers=headers, check=expect_status(200))  # fmt: skip
        done += len(latencies)
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", choices=["chat", "sse", "health", "models"], default="chat")
    parser.add_argument("--concurrency", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    parser.add_argument("--idle", action="store_true", help="sample waiting threads too (wall-clock time)")
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--postgres-server", default=DEFAULT_POSTGRES)
    parser.add_argument("--web-processes", type=int, default=1)
    parser.add_argument("--process", choices=["web", "history", "orchestrator"], default="web",
                        help="which platform process(es) to record")  # fmt: skip
    parser.add_argument("--py-spy", default=shutil.which("py-spy") or "py-spy")
    parser.add_argument("--out", type=Path, default=None, help="keep the raw recordings here")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="profile-web-"))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        with LivePlatform(Path(scratch), database=args.database, postgres_server=args.postgres_server,
                          web_processes=args.web_processes) as platform:  # fmt: skip
            echo = {"options": ECHO_OPTIONS, "max_waiting": 4096}
            platform.deploy("bench-echo", "echo", "-", {"stages": {"echo": echo}, "max_queue": 4096})
            request = request_of(args.path, platform.secret)
            asyncio.run(run_for(platform, request, args.concurrency, 2))  # warm up
            spies = []
            pids = platform.web_pids() if args.process == "web" else [platform.pids()[args.process]]
            for pid in pids:
                argv = [args.py_spy, "record", "-p", str(pid), "-d", str(int(args.seconds)), "-r", str(args.rate),
                        "--format", "raw", "--threads", "-o", str(out / f"{args.process}-{pid}.raw")]  # fmt: skip
                if args.idle:
                    argv.append("--idle")
                else:
                    argv.append("--gil")
                spies.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            started = time.perf_counter()
            done = asyncio.run(run_for(platform, request, args.concurrency, args.seconds))
            rate = done / (time.perf_counter() - started)
            for spy in spies:
                spy.wait()
    print(f"{args.path} at {args.concurrency} concurrent: {rate:.1f} req/s while recorded; "
          f"load average {os.getloadavg()[0]:.2f}; recordings in {out}")  # fmt: skip
    for raw in sorted(out.glob(f"{args.process}-*.raw")):
        print(f"\n===== {raw.name}")
        subprocess.run([sys.executable, str(Path(__file__).with_name("stack_split.py")), str(raw), "--top",
                        str(args.top)], check=False)  # fmt: skip


if __name__ == "__main__":
    main()
