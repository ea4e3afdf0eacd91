"""What the web tier costs: /v1/chat/completions (auth, validation, history row, quota, SSE),
/health and /v1/models against the bare serving path (`serve()` over the Redis orchestrator)
to the same echo deployment, in the same run.

    .venv/bin/python benchmarks/serving.py [--database sqlite|postgres] [--web-processes N]
                                           [--concurrency 40] [--requests 400] [--words 8]

Starts its own redis-server, Celery worker, orchestrator and web tier (`manage.py web`, N
daphne processes on one port) on a scratch SQLite file or a scratch PostgreSQL database
(`--postgres-server`, dropped afterwards). The HTTP client is benchmarks/http_load.py (raw
HTTP/1.1 keep-alive: httpx would spend more CPU than the server it measures). Prints, per
path, latency one request at a time and throughput under concurrency, then the bars:
throughput of /v1 over serve(), the p50 /v1 adds one at a time, /health's req/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
import uuid
from pathlib import Path

from http_load import Reply, expect_status, load
from live_platform import DEFAULT_POSTGRES, LivePlatform

ECHO_OPTIONS = {"tokens_per_step": 1}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def prompt(words: int) -> str:
    return " ".join(f"w{i}" for i in range(words))


async def direct(deployment_id: str, redis_url: str, total: int, concurrency: int, words: int):
    """The baseline: submit through serve() and read the request's output stream."""
    import redis.asyncio

    from control_plane.orchestrator.serving import serve
    from stages.protocol import SamplingParams, StageRequest

    client = redis.asyncio.Redis.from_url(redis_url, max_connections=concurrency + 16)
    latencies: list[float] = []
    remaining = [total]

    async def worker() -> None:
        while remaining[0] > 0:
            remaining[0] -= 1
            request = StageRequest(
                request_id=uuid.uuid4().hex,
                messages=[{"role": "user", "content": prompt(words)}],
                sampling=SamplingParams(max_tokens=512),
            )
            started = time.perf_counter()
            async for message in serve(deployment_id, request, client=client):
                if message.kind == "fail":
                    raise RuntimeError(message.error.message)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, total))))
    wall = time.perf_counter() - started
    await client.aclose()
    return latencies, wall


def check_chat(stream: bool):
    def check(reply: Reply) -> None:
        expect_status(200)(reply)
        if stream:
            assert reply.body.rstrip().endswith(b"data: [DONE]"), reply.body[-200:]
        else:
            assert json.loads(reply.body)["choices"][0]["message"]["content"], reply.body[:200]

    return check


def api_runner(platform: LivePlatform, words: int):
    auth = {"Authorization": f"Bearer {platform.secret}", "Content-Type": "application/json"}

    def chat(stream: bool):
        body = json.dumps({"model": "bench-echo", "messages": [{"role": "user", "content": prompt(words)}],
                           "stream": stream}).encode()  # fmt: skip
        return lambda total, concurrency: load(
            "127.0.0.1", platform.port, "POST", "/v1/chat/completions", total=total, concurrency=concurrency,
            body=body, headers=auth, check=check_chat(stream))  # fmt: skip

    def get(path: str, headers: dict[str, str] | None):
        return lambda total, concurrency: load(
            "127.0.0.1", platform.port, "GET", path, total=total, concurrency=concurrency, headers=headers,
            check=expect_status(200))  # fmt: skip

    return {
        "/v1 chat": chat(False),
        "/v1 chat stream (SSE)": chat(True),
        "/health": get("/health", None),
        "/v1/models": get("/v1/models", {"Authorization": auth["Authorization"]}),
    }


def cpu_by_process(platform: LivePlatform) -> dict[str, float]:
    """CPU seconds each kind of process has used so far (web, orchestrator, worker and its replica
    host, history writer, redis-server, and this client): per request, figures the machine's load
    changes much less than the rates beside them."""
    import psutil

    totals: dict[str, float] = {}
    pids = {**platform.pids(), "client": os.getpid()}
    for name, pid in pids.items():
        kind = "web" if name.startswith("web-") and name != "web-supervisor" else name.split("-child")[0]
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.NoSuchProcess:
            continue
        totals[kind] = totals.get(kind, 0.0) + times.user + times.system
    return totals


def cpu_spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {kind: after[kind] - before.get(kind, 0.0) for kind in after}


def row(name: str, one: list[float], loaded: list[float], wall: float, cpu_s: float) -> str:
    return (
        f"  {name:<24} {percentile(one, 0.5) * 1000:8.2f} {percentile(one, 0.99) * 1000:8.2f}"
        f"   {len(loaded) / wall:8.1f} {percentile(loaded, 0.5) * 1000:8.2f} {percentile(loaded, 0.99) * 1000:8.2f}"
        f"   {cpu_s / len(loaded) * 1000:8.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--postgres-server", default=DEFAULT_POSTGRES, help="a scratch database is made there")
    parser.add_argument("--web-processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--concurrency", type=int, default=40)
    parser.add_argument("--requests", type=int, default=400, help="requests per path under concurrency")
    parser.add_argument("--one-at-a-time", type=int, default=30, help="requests per path one at a time")
    parser.add_argument("--words", type=int, default=8)
    args = parser.parse_args()
    results: dict[str, tuple[list[float], list[float], float, dict[str, float]]] = {}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        with LivePlatform(Path(scratch), database=args.database, postgres_server=args.postgres_server,
                          web_processes=args.web_processes) as platform:  # fmt: skip
            deployment = platform.deploy("bench-echo", "echo", "-", {"stages": {"echo": {
                "options": ECHO_OPTIONS, "max_waiting": 4096}}, "max_queue": 4096})  # fmt: skip
            deployment_id = str(deployment.id)

            def baseline(total: int, concurrency: int):
                return direct(deployment_id, platform.redis_url, total, concurrency, args.words)

            runners = {"serve() (baseline)": baseline, **api_runner(platform, args.words)}
            try:
                for run in runners.values():  # warm every path and every web process
                    asyncio.run(run(args.concurrency * 2, args.concurrency))
                for name, run in runners.items():
                    one, _ = asyncio.run(run(args.one_at_a_time, 1))
                    cpu_before = cpu_by_process(platform)
                    loaded, wall = asyncio.run(run(args.requests, args.concurrency))
                    results[name] = (one, loaded, wall, cpu_spent(cpu_before, cpu_by_process(platform)))
            except BaseException:
                print(platform.log_tail())
                raise
    load_after = os.getloadavg()
    print(f"echo deployment, {args.words} words per request, database {args.database}, "
          f"{args.web_processes} web process(es), {os.cpu_count()} cores")  # fmt: skip
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min)")
    print(f"  {'':<24} {'one at a time (ms)':>17}   {args.concurrency} concurrent")
    print(f"  {'path':<24} {'p50':>8} {'p99':>8}   {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}   {'web CPU ms/req':>8}")
    for name, (one, loaded, wall, cpu) in results.items():
        print(row(name, one, loaded, wall, cpu.get("web", 0.0)))
    kinds = ["web", "orchestrator", "worker", "history", "redis-server", "client"]
    print(f"CPU ms per request under concurrency, by process: {', '.join(kinds)}, all (of {os.cpu_count()} cores)")
    for name, (_, loaded, _, cpu) in results.items():
        split = "  ".join(f"{cpu.get(kind, 0.0) / len(loaded) * 1000:6.2f}" for kind in kinds)
        print(f"  {name:<24} {split}  {sum(cpu.values()) / len(loaded) * 1000:6.2f}")
    base_one, base_loaded, base_wall, _ = results["serve() (baseline)"]
    base_rate = len(base_loaded) / base_wall
    print("bars:")
    for name in ("/v1 chat", "/v1 chat stream (SSE)"):
        one, loaded, wall, _ = results[name]
        added = (percentile(one, 0.5) - percentile(base_one, 0.5)) * 1000
        ratio = len(loaded) / wall / base_rate
        print(f"  {name:<24} throughput {ratio:.2f}x serve()'s (bar >= 0.5x), added p50 one at a time "
              f"{added:.2f} ms (bar <= 5 ms)")  # fmt: skip
    _, health, health_wall, health_split = results["/health"]
    health_cpu = health_split.get("web", 0.0)
    print(f"  /health                  {len(health) / health_wall:.0f} req/s at {args.concurrency} concurrent "
          f"(bar >= 1500); {health_cpu / len(health) * 1000:.2f} ms of web CPU each, "
          f"{len(health) / health_cpu:.0f} req/s per busy core")  # fmt: skip


if __name__ == "__main__":
    main()
