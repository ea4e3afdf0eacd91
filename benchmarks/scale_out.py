"""Scale-out: the tiny Qwen2.5-Omni on one worker host vs two, each host pinned to one core.

Two hosts are network namespaces of this machine (tests/hosts/host_bed.py: own hostname, own
/dev/shm, own pid space, a veth pair to the root namespace), each with its own Celery worker pool
(`cpu.a`, `cpu.b`) pinned with taskset to one core; Redis (TCP, on the veth addresses) and the
orchestrator run in the root namespace, unpinned, with a scratch SQLite control plane (workers
never touch the database). Phase 1 deploys every stage once on host A; phase 2 deploys every
stage twice, one replica per host (`pools: ["cpu.a", "cpu.b"]`). Each phase sends a warm-up
round, then `--requests` chat requests (text + audio) at `--concurrency` straight to the
orchestrator (`serving.serve`), and reports requests/s, audio seconds per second, TTFP and RTF.
Phase 3 deploys the echo pipeline (no model: what orchestration costs) with one replica per host
and sends `--echo-requests` at `--echo-concurrency` with one orchestrator, then with a second
orchestrator process beside the first (they share the work through the inbox's consumer group).

    sudo .venv/bin/python benchmarks/scale_out.py --concurrency 8 --requests 16

Needs root (network namespaces) and 2 cores. The bar: two hosts give >= 1.7x one host's throughput.
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
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "hosts")]

from host_bed import HostBed, available  # noqa: E402
from hosts_stack import TcpRedis  # noqa: E402
from procs import PYTHON, Proc, wait_for  # noqa: E402

BAR = 1.7
POOLS = "cpu,gpu,cpu.a,cpu.b"


def deploy_config(pools: list[str], talker_tokens: int) -> dict:
    stage = {"replicas": len(pools), "pools": pools}
    return {
        "max_realtime_lag_s": None,  # a loaded core falls behind real time: measure it, do not fail it
        "stages": {
            "thinker": stage,
            "talker": {**stage, "sampling": {"max_tokens": talker_tokens}},
            "code2wav": stage,
        },
    }


class ScaleOut:
    def __init__(self, scratch: Path, cpus: dict[str, str]):
        self.scratch = scratch
        self.cpus = cpus
        self.bed = HostBed(list(cpus), tag="so")
        self.procs: dict[str, Proc] = {}
        self.env: dict[str, str] = {}
        self.redis: TcpRedis | None = None

    def __enter__(self) -> ScaleOut:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self.bed.create()
        self.redis = TcpRedis(self.scratch / "redis", self.bed.root_ips).start()
        env = {
            **os.environ,
            "OMNISTAGE_HEARTBEAT_INTERVAL": "1",
            "OMNISTAGE_HEARTBEAT_TTL": "10",  # three replica hosts loading on one shared core starve shorter ones
            "OMNISTAGE_LOG_LEVEL": "WARNING",
            "OMNISTAGE_KNOWN_POOLS": POOLS,
            "OMNISTAGE_VAR_DIR": str(self.scratch),
            "OMNISTAGE_MODELS_DIR": str(REPO / "var" / "models"),
            "REDIS_URL": self.redis.url(),
            "DJANGO_SETTINGS_MODULE": "control_plane.settings",
            "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
        }
        env.pop("DATABASE_URL", None)  # SQLite under the scratch var dir
        os.environ.pop("DATABASE_URL", None)
        os.environ.update({key: env[key] for key in ("OMNISTAGE_KNOWN_POOLS", "OMNISTAGE_VAR_DIR",
                                                     "OMNISTAGE_MODELS_DIR", "REDIS_URL", "DJANGO_SETTINGS_MODULE")})  # fmt: skip
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        call_command("sync_pipelines", verbosity=0)
        self.env = env
        logs = self.scratch / "logs"
        logs.mkdir(exist_ok=True)
        for name, cpus in self.cpus.items():
            host_env = {**env, "REDIS_URL": self.redis.url(self.bed[name].root_ip)}
            worker = [PYTHON, "-m", "celery", "-A", "control_plane", "worker", "-Q", f"cpu.{name}", "-c", "1",
                      "-n", f"{name}@%h", "--without-mingle", "--without-gossip", "-l", "WARNING"]  # fmt: skip
            self.procs[f"worker-{name}"] = Proc(self.bed.argv(name, worker, cpus=cpus), host_env, logs / f"{name}.log")
        self.procs["orchestrator"] = Proc([PYTHON, "manage.py", "orchestrator"], env, logs / "orchestrator.log")

    def deploy(self, name: str, config: dict, timeout: float = 900):
        from control_plane.deployments.models import Deployment, Pipeline
        from control_plane.deployments.services import deployment_create

        deployment = deployment_create(
            name=name,
            pipeline=Pipeline.objects.get(name="qwen2_5_omni"),
            model_dir=str(REPO / "var" / "models" / "qwen2_5_omni"),
            deploy_config=config,
        )
        wait_for(lambda: Deployment.objects.get(pk=deployment.pk).state == "RUNNING", timeout=timeout,
                 interval=0.5, what=f"{name} RUNNING")  # fmt: skip
        return deployment

    def add_orchestrator(self, name: str) -> None:
        import redis

        from stages import streams

        client = redis.Redis.from_url(self.redis.url())
        before = set(client.scan_iter(streams.orchestrator_heartbeat_pattern()))
        self.procs[name] = Proc([PYTHON, "manage.py", "orchestrator"], self.env,
                                self.scratch / "logs" / f"{name}.log")  # fmt: skip
        wait_for(lambda: set(client.scan_iter(streams.orchestrator_heartbeat_pattern())) - before, timeout=60,
                 interval=0.2, what=f"{name}'s heartbeat")  # fmt: skip
        client.close()

    def undeploy(self, deployment) -> None:
        from control_plane.deployments.models import Deployment
        from control_plane.deployments.services import deployment_stop

        deployment_stop(deployment=deployment)
        wait_for(lambda: Deployment.objects.get(pk=deployment.pk).state == "STOPPED", timeout=120,
                 interval=0.5, what=f"{deployment.name} STOPPED")  # fmt: skip

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.stop(timeout=10)
        self.bed.remove()
        if self.redis is not None:
            self.redis.stop()


async def one_request(redis_url: str, deployment_id: str, text: str, thinker_tokens: int, client=None) -> dict:
    import redis.asyncio

    from control_plane.orchestrator.serving import serve
    from stages.protocol import SamplingParams, StageRequest

    request = StageRequest(
        request_id=f"so-{uuid.uuid4().hex[:10]}",
        messages=[{"role": "user", "content": text}],
        sampling=SamplingParams(max_tokens=thinker_tokens, temperature=0.0),
        arrival_time=time.time(),
    )
    own_client = client is None
    client = client or redis.asyncio.Redis.from_url(redis_url)
    try:
        last = None
        async for message in serve(deployment_id, request, client=client, idle_timeout_s=300):
            last = message
    finally:
        if own_client:
            await client.aclose()
    if last is None or last.kind != "complete":
        raise RuntimeError(f"request {request.request_id} ended with {last}")
    return last.summary.metrics


async def round_of(redis_url: str, deployment_id: str, count: int, concurrency: int, thinker_tokens: int):
    gate = asyncio.Semaphore(concurrency)

    async def limited(index: int) -> dict:
        async with gate:
            return await one_request(redis_url, deployment_id, f"Tell me a story, number {index}.", thinker_tokens)

    started = time.perf_counter()
    metrics = await asyncio.gather(*(limited(i) for i in range(count)))
    return metrics, time.perf_counter() - started


async def echo_round(redis_url: str, deployment_id: str, count: int, concurrency: int) -> float:
    """Requests per second of `count` echo requests, `concurrency` at a time, one shared client."""
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(redis_url, max_connections=concurrency * 2)
    gate = asyncio.Semaphore(concurrency)

    async def limited(index: int) -> dict:
        async with gate:
            return await one_request(redis_url, deployment_id, f"echo {index} a b c d e f g", 16, client=client)

    try:
        started = time.perf_counter()
        await asyncio.gather(*(limited(i) for i in range(count)))
        return count / (time.perf_counter() - started)
    finally:
        await client.aclose()


def orchestrators_phase(bench: ScaleOut, args) -> tuple[float, float]:
    """Echo requests/s with one orchestrator, then with two."""
    config = {"max_queue": 4096, "stages": {"echo": {"replicas": 2, "pools": ["cpu.a", "cpu.b"], "max_waiting": 4096,
                                                     "options": {"tokens_per_step": 8}}}}  # fmt: skip
    from control_plane.deployments.models import Deployment, Pipeline
    from control_plane.deployments.services import deployment_create

    deployment = deployment_create(name="scale-echo", pipeline=Pipeline.objects.get(name="echo"), model_dir="-",
                                   deploy_config=config)  # fmt: skip
    wait_for(lambda: Deployment.objects.get(pk=deployment.pk).state == "RUNNING", timeout=300, interval=0.5,
             what="scale-echo RUNNING")  # fmt: skip
    run = lambda: asyncio.run(  # noqa: E731
        echo_round(bench.redis.url(), str(deployment.id), args.echo_requests, args.echo_concurrency)
    )
    try:
        run()  # warm-up
        one = run()
        bench.add_orchestrator("orchestrator-2")
        run()  # warm-up: the second orchestrator has joined the group
        two = run()
    finally:
        bench.undeploy(deployment)
    return one, two


def phase(bench: ScaleOut, name: str, pools: list[str], args) -> dict:
    deployment = bench.deploy(name, deploy_config(pools, args.talker_tokens))
    try:
        run = lambda count: asyncio.run(  # noqa: E731
            round_of(bench.redis.url(), str(deployment.id), count, args.concurrency, args.thinker_tokens)
        )
        run(args.concurrency)  # warm-up: every replica has served
        metrics, wall = run(args.requests)
    finally:
        bench.undeploy(deployment)
    audio = sum(m.get("audio_s", 0.0) for m in metrics)
    return {
        "hosts": len(pools),
        "requests": len(metrics),
        "wall_s": wall,
        "req_per_s": len(metrics) / wall,
        "audio_s_per_s": audio / wall,
        "ttfp_p50_s": statistics.median(m["ttfp_s"] for m in metrics),
        "ttfp_mean_s": statistics.fmean(m["ttfp_s"] for m in metrics),
        "rtf_p50": statistics.median(m["rtf"] for m in metrics),
        "rtf_mean": statistics.fmean(m["rtf"] for m in metrics),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests", type=int, default=16, help="measured requests per phase (after a warm-up round)")
    parser.add_argument("--thinker-tokens", type=int, default=16)
    parser.add_argument("--talker-tokens", type=int, default=50, help="codec codes per reply (50 per audio second)")
    parser.add_argument("--cpus", default="0,1", help="the cores of host A and host B")
    parser.add_argument("--echo-requests", type=int, default=2000, help="echo requests per orchestrator count")
    parser.add_argument("--echo-concurrency", type=int, default=64)
    parser.add_argument("--phases", nargs="+", choices=["hosts", "orchestrators"], default=["hosts", "orchestrators"])
    args = parser.parse_args()
    why = available()
    if why is not None:
        print(f"scale_out needs network namespaces: {why}")
        return 2
    core_a, core_b = args.cpus.split(",")
    with tempfile.TemporaryDirectory(prefix="omni-scale-out-") as scratch:
        with ScaleOut(Path(scratch), {"a": core_a, "b": core_b}) as bench:
            if "hosts" in args.phases:
                one = phase(bench, "scale-one", ["cpu.a"], args)
                two = phase(bench, "scale-two", ["cpu.a", "cpu.b"], args)
            if "orchestrators" in args.phases:
                echo_one, echo_two = orchestrators_phase(bench, args)
    if "hosts" in args.phases:
        print_hosts(one, two, args)
    if "orchestrators" in args.phases:
        print(f"echo pipeline, one replica per host, {args.echo_requests} requests at concurrency "
              f"{args.echo_concurrency}: one orchestrator {echo_one:.0f} req/s, two {echo_two:.0f} req/s "
              f"({echo_two / echo_one:.2f}x)")  # fmt: skip
    return 0


def print_hosts(one: dict, two: dict, args) -> None:
    print(f"tiny Qwen2.5-Omni, concurrency {args.concurrency}, {args.requests} requests per phase, "
          f"thinker {args.thinker_tokens} tokens, talker {args.talker_tokens} codes; one core per host")  # fmt: skip
    print(f"{'hosts':>5} {'req/s':>7} {'audio s/s':>9} {'TTFP p50':>9} {'TTFP mean':>9} {'RTF p50':>8} {'RTF mean':>8}")
    for row in (one, two):
        print(f"{row['hosts']:>5} {row['req_per_s']:>7.3f} {row['audio_s_per_s']:>9.3f} {row['ttfp_p50_s']:>8.2f}s "
              f"{row['ttfp_mean_s']:>8.2f}s {row['rtf_p50']:>8.3f} {row['rtf_mean']:>8.3f}")  # fmt: skip
    ratio = two["req_per_s"] / one["req_per_s"]
    print(f"throughput two hosts / one host: {ratio:.2f}x (bar {BAR}x: {'met' if ratio >= BAR else 'NOT met'})")


if __name__ == "__main__":
    sys.exit(main())
