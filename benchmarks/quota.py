"""What quota admission costs per request: `quota_admit` + `quota_settle` under four limits, against a
Redis PING round trip to the same server, measured in the same run.

    .venv/bin/python benchmarks/quota.py [--requests 2000]

Runs on a scratch SQLite database and its own redis-server (nothing of a running `make run` is touched).
The limits: requests per minute, text tokens per day, images per day, concurrent requests.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def timed(call, repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="quota_bench_"))
    from procs import RedisServer

    redis_server = RedisServer(scratch / "redis").start()
    os.environ.update(OMNISTAGE_VAR_DIR=str(scratch), REDIS_URL=redis_server.url)
    os.environ.pop("DATABASE_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from control_plane.accounts.models import Metric, Quota, Window
    from control_plane.accounts.quota import quota_admit, quota_settle
    from control_plane.redis_client import get_redis

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("bench")
    limits = [
        (Metric.REQUESTS, Window.MINUTE), (Metric.TEXT_TOKENS, Window.DAY),
        (Metric.IMAGES, Window.DAY), (Metric.CONCURRENT_REQUESTS, Window.NONE),
    ]  # fmt: skip
    for metric, window in limits:
        Quota.objects.create(user=user, metric=metric, window=window, limit=10**12)

    def admit_and_settle() -> None:
        admission = quota_admit(user=user, estimate={"text_tokens": 64})
        quota_settle(admission, {"text_tokens": 40})

    client = get_redis()
    try:
        timed(admit_and_settle, 50)  # warm-up: the rule cache, the Lua scripts
        timed(client.ping, 50)
        quota = timed(admit_and_settle, args.requests)
        ping = timed(client.ping, args.requests)
    finally:
        redis_server.stop()
    print(f"{len(limits)} limits, {args.requests} requests, one at a time")
    print(f"  quota_admit + quota_settle   p50 {median_ms(quota):.3f} ms")
    print(f"  Redis PING                   p50 {median_ms(ping):.3f} ms")
    print(f"  admission costs {statistics.median(quota) / statistics.median(ping):.1f} PING round trips")


if __name__ == "__main__":
    main()
