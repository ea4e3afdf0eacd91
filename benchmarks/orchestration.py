"""What the platform path costs: an echo stage behind the Redis-stream orchestrator and a
Celery-hosted replica, against the same stage under the in-process driver, same run.

    .venv/bin/python benchmarks/orchestration.py [--requests 100] [--words 4]

Starts its own redis-server, Celery worker and orchestrator on a scratch SQLite database
(nothing of a running `make run` is touched). Prints latency percentiles of both paths,
the added latency (platform minus in-process) and requests/s of both.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
ECHO_OPTIONS = {"tokens_per_step": 1000}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def prompt(words: int) -> str:
    return " ".join(f"w{i}" for i in range(words))


async def in_process(requests: int, words: int) -> tuple[list[float], float]:
    from stages import AsyncOmni

    omni = AsyncOmni("-", family="echo", deploy={"stages": {"echo": {"options": ECHO_OPTIONS}}, "max_queue": 4096})
    await omni.start()

    async def one() -> float:
        started = time.perf_counter()
        async for _ in omni.generate(prompt(words)):
            pass
        return time.perf_counter() - started

    await asyncio.gather(*(one() for _ in range(8)))  # warm up
    started = time.perf_counter()
    latencies = await asyncio.gather(*(one() for _ in range(requests)))
    wall = time.perf_counter() - started
    await omni.close()
    return list(latencies), wall


def start_platform(var_dir: Path):
    from procs import PYTHON, Proc, RedisServer, wait_for

    redis_server = RedisServer(var_dir / "redis").start()
    env = {
        **os.environ,
        "OMNISTAGE_VAR_DIR": str(var_dir),
        "REDIS_URL": redis_server.url,
        "OMNISTAGE_HEARTBEAT_INTERVAL": "0.5",
        "OMNISTAGE_HEARTBEAT_TTL": "3",
    }
    env.pop("DATABASE_URL", None)
    os.environ.update({k: env[k] for k in ("OMNISTAGE_VAR_DIR", "REDIS_URL")})
    os.environ.pop("DATABASE_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("sync_pipelines", verbosity=0)
    logs = var_dir / "logs"
    logs.mkdir()
    procs = [
        Proc([PYTHON, "-m", "celery", "-A", "control_plane", "worker", "-Q", "cpu", "-c", "1", "--without-mingle",
              "--without-gossip", "-l", "WARNING"], env, logs / "worker.log"),
        Proc([PYTHON, *os.environ.get("ORCH_PROFILE", "").split(), "manage.py", "orchestrator"], env, logs / "orchestrator.log"),
    ]  # fmt: skip
    from control_plane.deployments.models import Deployment, Pipeline
    from control_plane.deployments.services import deployment_create

    deployment = deployment_create(
        name="bench-echo",
        pipeline=Pipeline.objects.get(name="echo"),
        model_dir="-",
        deploy_config={"stages": {"echo": {"options": ECHO_OPTIONS}}, "max_queue": 4096},
    )
    wait_for(
        lambda: Deployment.objects.get(pk=deployment.pk).state == "RUNNING", timeout=120, what="deployment RUNNING"
    )
    return redis_server, procs, str(deployment.id)


async def platform(deployment_id: str, redis_url: str, requests: int, words: int) -> tuple[list[float], float]:
    import redis.asyncio

    from control_plane.orchestrator.serving import serve
    from stages.protocol import StageRequest

    client = redis.asyncio.Redis.from_url(redis_url, max_connections=requests + 16)

    async def one() -> float:
        request = StageRequest(request_id=uuid.uuid4().hex, prompt=prompt(words))
        started = time.perf_counter()
        async for message in serve(deployment_id, request, client=client):
            if message.kind == "fail":
                raise RuntimeError(message.error.message)
        return time.perf_counter() - started

    await asyncio.gather(*(one() for _ in range(8)))
    started = time.perf_counter()
    latencies = await asyncio.gather(*(one() for _ in range(requests)))
    wall = time.perf_counter() - started
    await client.aclose()
    return list(latencies), wall


def report(name: str, latencies: list[float], wall: float, requests: int) -> None:
    print(
        f"{name:<12} p50 {percentile(latencies, 0.5) * 1000:8.2f} ms  p99 {percentile(latencies, 0.99) * 1000:8.2f} ms"
        f"  mean {statistics.mean(latencies) * 1000:8.2f} ms  {requests / wall:8.1f} req/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--words", type=int, default=4)
    args = parser.parse_args()

    local, local_wall = asyncio.run(in_process(args.requests, args.words))
    with tempfile.TemporaryDirectory() as scratch:
        redis_server, procs, deployment_id = start_platform(Path(scratch))
        try:
            remote, remote_wall = asyncio.run(platform(deployment_id, redis_server.url, args.requests, args.words))
            sequential = [
                asyncio.run(platform(deployment_id, redis_server.url, 1, args.words))[0][0] for _ in range(20)
            ]
            local_seq = [asyncio.run(in_process(1, args.words))[0][0] for _ in range(5)]
        finally:
            for proc in procs:
                proc.stop()
            redis_server.stop()
    print(f"echo stage, {args.requests} concurrent requests of {args.words} words")
    report("in-process", local, local_wall, args.requests)
    report("platform", remote, remote_wall, args.requests)
    added_p50 = percentile(sequential, 0.5) - percentile(local_seq, 0.5)
    print(f"one request at a time: platform p50 {percentile(sequential, 0.5) * 1000:.2f} ms, "
          f"in-process p50 {percentile(local_seq, 0.5) * 1000:.2f} ms -> added {added_p50 * 1000:.2f} ms")  # fmt: skip
    print(f"added latency under load: p50 {(percentile(remote, 0.5) - percentile(local, 0.5)) * 1000:.2f} ms, "
          f"p99 {(percentile(remote, 0.99) - percentile(local, 0.99)) * 1000:.2f} ms")  # fmt: skip
    print(f"throughput ratio platform/in-process: {(args.requests / remote_wall) / (args.requests / local_wall):.2f}")


if __name__ == "__main__":
    main()
