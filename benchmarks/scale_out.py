"""Scale-out: the tiny Qwen2.5-Omni on one worker host vs two, each host pinned to one core.

Two hosts are network namespaces of this machine (tests/hosts/host_bed.py: own hostname, own
/dev/shm, own pid space, a veth pair to the root namespace), each with its own Celery worker pool
(`cpu.a`, `cpu.b`) pinned with taskset to one core; Redis (TCP, on the veth addresses) and the
orchestrator run in the root namespace, unpinned, with a scratch SQLite control plane (workers
never touch the database). Phase 1 deploys every stage once on host A; phase 2 deploys every
stage twice, one replica per host (`pools: ["cpu.a", "cpu.b"]`). Each phase sends a warm-up
round, then `--requests` chat requests (text + audio) at `--concurrency` straight to the
orchestrator (`serving.serve`), and reports requests/s, audio seconds per second, TTFP and RTF.

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
            "PYTHONPATH": str(REPO),
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


async def one_request(redis_url: str, deployment_id: str, text: str, thinker_tokens: int) -> dict:
    import redis.asyncio

    from control_plane.orchestrator.serving import serve
    from stages.protocol import SamplingParams, StageRequest

    request = StageRequest(
        request_id=f"so-{uuid.uuid4().hex[:10]}",
        messages=[{"role": "user", "content": text}],
        sampling=SamplingParams(max_tokens=thinker_tokens, temperature=0.0),
        arrival_time=time.time(),
    )
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        last = None
        async for message in serve(deployment_id, request, client=client, idle_timeout_s=300):
            last = message
    finally:
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
    args = parser.parse_args()
    why = available()
    if why is not None:
        print(f"scale_out needs network namespaces: {why}")
        return 2
    core_a, core_b = args.cpus.split(",")
    with tempfile.TemporaryDirectory(prefix="omni-scale-out-") as scratch:
        with ScaleOut(Path(scratch), {"a": core_a, "b": core_b}) as bench:
            one = phase(bench, "scale-one", ["cpu.a"], args)
            two = phase(bench, "scale-two", ["cpu.a", "cpu.b"], args)
    print(f"tiny Qwen2.5-Omni, concurrency {args.concurrency}, {args.requests} requests per phase, "
          f"thinker {args.thinker_tokens} tokens, talker {args.talker_tokens} codes; one core per host")  # fmt: skip
    print(f"{'hosts':>5} {'req/s':>7} {'audio s/s':>9} {'TTFP p50':>9} {'TTFP mean':>9} {'RTF p50':>8} {'RTF mean':>8}")
    for row in (one, two):
        print(f"{row['hosts']:>5} {row['req_per_s']:>7.3f} {row['audio_s_per_s']:>9.3f} {row['ttfp_p50_s']:>8.2f}s "
              f"{row['ttfp_mean_s']:>8.2f}s {row['rtf_p50']:>8.3f} {row['rtf_mean']:>8.3f}")  # fmt: skip
    ratio = two["req_per_s"] / one["req_per_s"]
    print(f"throughput two hosts / one host: {ratio:.2f}x (bar {BAR}x: {'met' if ratio >= BAR else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
