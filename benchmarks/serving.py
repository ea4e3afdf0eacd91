"""What the OpenAI-compatible layer costs: /v1/chat/completions (auth, validation, history
row, quota, SSE) against the bare serving path (`serve()` over the Redis orchestrator) to
the same echo deployment, in the same run.

    .venv/bin/python benchmarks/serving.py [--requests 50] [--words 8]

Starts its own redis-server, Celery worker, orchestrator and daphne on a scratch SQLite
database (nothing of a running `make run` is touched). Prints latency percentiles of
each path one request at a time and under concurrency, the added latency and the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
ECHO_OPTIONS = {"tokens_per_step": 1}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def prompt(words: int) -> str:
    return " ".join(f"w{i}" for i in range(words))


def start_platform(var_dir: Path):
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
        name="bench-echo",
        pipeline=Pipeline.objects.get(name="echo"),
        model_dir="-",
        deploy_config={"stages": {"echo": {"options": ECHO_OPTIONS}}, "max_queue": 4096},
    )
    wait_for(
        lambda: Deployment.objects.get(pk=deployment.pk).state == "RUNNING", timeout=120, what="deployment RUNNING"
    )
    import httpx

    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: httpx.get(f"{base}/health").status_code == 200, timeout=60, what="web up")
    return redis_server, procs, str(deployment.id), base, secret


async def direct(deployment_id: str, redis_url: str, requests: int, words: int) -> tuple[list[float], float]:
    """The baseline: submit through serve() and read the request's output stream."""
    import redis.asyncio

    from control_plane.orchestrator.serving import serve
    from stages.protocol import SamplingParams, StageRequest

    client = redis.asyncio.Redis.from_url(redis_url, max_connections=requests + 16)

    async def one() -> float:
        request = StageRequest(
            request_id=uuid.uuid4().hex,
            messages=[{"role": "user", "content": prompt(words)}],
            sampling=SamplingParams(max_tokens=512),
        )
        started = time.perf_counter()
        async for message in serve(deployment_id, request, client=client):
            if message.kind == "fail":
                raise RuntimeError(message.error.message)
        return time.perf_counter() - started

    started = time.perf_counter()
    latencies = await asyncio.gather(*(one() for _ in range(requests)))
    wall = time.perf_counter() - started
    await client.aclose()
    return list(latencies), wall


async def via_api(base: str, secret: str, requests: int, words: int, stream: bool) -> tuple[list[float], float]:
    """The same request through /v1/chat/completions; for streams, also the time to the first token."""
    import httpx

    body = {"model": "bench-echo", "messages": [{"role": "user", "content": prompt(words)}], "stream": stream}
    headers = {"Authorization": f"Bearer {secret}"}
    limits = httpx.Limits(max_connections=requests + 4)
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=120, limits=limits) as client:

        async def one() -> float:
            started = time.perf_counter()
            if not stream:
                response = await client.post("/v1/chat/completions", json=body)
                assert response.status_code == 200, response.text
                return time.perf_counter() - started
            async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: {") and json.loads(line[6:])["choices"]:
                        pass
            return time.perf_counter() - started

        started = time.perf_counter()
        latencies = await asyncio.gather(*(one() for _ in range(requests)))
        return list(latencies), time.perf_counter() - started


def line(name: str, latencies: list[float], wall: float) -> str:
    return (
        f"{name:<26} p50 {percentile(latencies, 0.5) * 1000:8.2f} ms  p99 {percentile(latencies, 0.99) * 1000:8.2f} ms"
        f"  {len(latencies) / wall:7.1f} req/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--words", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        redis_server, procs, deployment_id, base, secret = start_platform(Path(scratch))
        try:
            asyncio.run(direct(deployment_id, redis_server.url, 4, args.words))  # warm up
            asyncio.run(via_api(base, secret, 4, args.words, False))
            one_direct = [asyncio.run(direct(deployment_id, redis_server.url, 1, args.words))[0][0] for _ in range(20)]
            one_api = [asyncio.run(via_api(base, secret, 1, args.words, False))[0][0] for _ in range(20)]
            one_sse = [asyncio.run(via_api(base, secret, 1, args.words, True))[0][0] for _ in range(20)]
            load_direct, wall_direct = asyncio.run(direct(deployment_id, redis_server.url, args.requests, args.words))
            load_api, wall_api = asyncio.run(via_api(base, secret, args.requests, args.words, False))
            load_sse, wall_sse = asyncio.run(via_api(base, secret, args.requests, args.words, True))
        except BaseException:
            print((Path(scratch) / "logs" / "web.log").read_text()[-5000:])
            raise
        finally:
            for proc in procs:
                proc.stop()
            redis_server.stop()
    print(f"echo deployment, {args.words} words per request")
    print("one at a time (20 each):")
    print(line("  serve() (baseline)", one_direct, sum(one_direct)))
    print(line("  /v1 chat", one_api, sum(one_api)))
    print(line("  /v1 chat stream (SSE)", one_sse, sum(one_sse)))
    print(f"{args.requests} concurrent:")
    print(line("  serve() (baseline)", load_direct, wall_direct))
    print(line("  /v1 chat", load_api, wall_api))
    print(line("  /v1 chat stream (SSE)", load_sse, wall_sse))
    base_p50 = percentile(one_direct, 0.5)
    print(f"added by /v1 one at a time: p50 {(percentile(one_api, 0.5) - base_p50) * 1000:.2f} ms "
          f"(ratio {percentile(one_api, 0.5) / base_p50:.2f}x), SSE ratio {percentile(one_sse, 0.5) / base_p50:.2f}x")  # fmt: skip
    print(f"throughput ratio /v1 over serve(): {wall_direct / wall_api:.2f} (SSE {wall_direct / wall_sse:.2f})")


if __name__ == "__main__":
    main()
