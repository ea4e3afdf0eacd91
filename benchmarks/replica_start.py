"""Replica host start: a fresh interpreter vs a fork of the worker's host zygote, same run.

    .venv/bin/python benchmarks/replica_start.py [--stages thinker talker code2wav] [--repeats 3]

For each stage of the tiny Qwen2.5-Omni (built under var/models if missing), starts replica hosts
the two ways the worker can (`subprocess` of `python -m workers.replica_host`, and
`workers.zygote_spawn.spawn` from a zygote that is already up) and reports, per stage, the median
wall seconds until the host's heartbeat says READY and the host's CPU seconds by then, with the
ratio fresh / forked. The zygote's own start (its imports, paid once per worker) is reported
apart. Needs Redis (`REDIS_URL`, database 15 is used and cleared of the keys it writes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

STAGE_IDS = {"thinker": 0, "talker": 1, "code2wav": 2}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spec_for(stage: str, model_dir: Path):
    import msgspec

    from stages.protocol import ReplicaSpec

    return msgspec.convert(
        {
            "replica_id": f"start-{uuid.uuid4().hex[:10]}",
            "deployment_id": f"start-{uuid.uuid4().hex[:10]}",
            "family": "qwen2_5_omni",
            "stage": stage,
            "stage_id": STAGE_IDS[stage],
            "model_dir": str(model_dir),
            "stage_deploy": {},
        },
        ReplicaSpec,
    )


def until_ready(client, spec, pid: int, started: float) -> tuple[float, float]:
    """(wall seconds from `started`, the host's CPU seconds) when its heartbeat first says READY."""
    from workers.replica_status import read_status

    while True:
        status = read_status(client, spec.replica_id)
        if status is not None and status.state == "READY":
            return time.perf_counter() - started, cpu_seconds(pid)
        if status is not None and status.state == "ERROR":
            raise RuntimeError(f"{spec.stage} failed to load: {status.error}")
        time.sleep(0.02)


def stop(client, spec, pid: int) -> None:
    from stages import streams
    from workers.processes import pid_alive

    os.kill(pid, 15)
    while pid_alive(pid):
        time.sleep(0.02)
    client.delete(streams.replica_input(spec.replica_id), streams.deployment_output(spec.deployment_id))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stages", nargs="+", default=list(STAGE_IDS), choices=list(STAGE_IDS))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import redis

    from stages.tiny import build_all
    from workers import zygote_spawn
    from workers.replica_launcher import host_argv

    model_dir = build_all(REPO / "var" / "models", only=["qwen2_5_omni"])["qwen2_5_omni"]
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0").rsplit("/", 1)[0] + "/15"
    client = redis.Redis.from_url(url)
    env = {**os.environ, "OMNISTAGE_HEARTBEAT_INTERVAL": "0.05", "OMNISTAGE_LOG_LEVEL": "WARNING"}
    worker = os.getpid()  # the zygote and the hosts watch this process

    started = time.perf_counter()
    first = spec_for(args.stages[0], model_dir)
    pid = zygote_spawn.spawn(host_argv(first, url, worker), env, REPO, worker)
    if pid is None:
        raise SystemExit("no host zygote could be started")
    zygote_s = time.perf_counter() - started
    stop(client, first, pid)
    print(f"zygote up and a first host forked after {zygote_s:.2f} s (once per worker)", flush=True)

    print(f"{'stage':>9} {'fresh wall':>10} {'fresh cpu':>9} {'forked wall':>11} {'forked cpu':>10} {'cpu ratio':>9}")
    for stage in args.stages:
        fresh, forked = [], []
        for _ in range(args.repeats):
            spec = spec_for(stage, model_dir)
            began = time.perf_counter()
            process = subprocess.Popen(host_argv(spec, url, worker), cwd=REPO, env=env, stdin=subprocess.DEVNULL)
            fresh.append(until_ready(client, spec, process.pid, began))
            stop(client, spec, process.pid)
            process.wait()

            spec = spec_for(stage, model_dir)
            began = time.perf_counter()
            pid = zygote_spawn.spawn(host_argv(spec, url, worker), env, REPO, worker)
            forked.append(until_ready(client, spec, pid, began))
            stop(client, spec, pid)
        fresh_wall, fresh_cpu = (statistics.median(values) for values in zip(*fresh, strict=True))
        forked_wall, forked_cpu = (statistics.median(values) for values in zip(*forked, strict=True))
        print(f"{stage:>9} {fresh_wall:>9.2f}s {fresh_cpu:>8.2f}s {forked_wall:>10.2f}s {forked_cpu:>9.2f}s "
              f"{fresh_cpu / forked_cpu:>8.2f}x", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
