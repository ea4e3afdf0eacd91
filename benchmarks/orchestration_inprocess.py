"""What the in-process orchestration costs: the echo stage behind the in-process driver
(orchestrator core + asyncio loop + engine thread) vs the same engine stepped bare, in
the same run. 100 concurrent requests by default; prints latency p50/p99, requests/s and
the added latency.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/orchestration_inprocess.py [--requests 100] [--words 8] [--pipeline default]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stages import AsyncOmni  # noqa: E402
from stages.config import DeployConfig  # noqa: E402
from stages.echo import EchoEngine  # noqa: E402
from stages.echo import family as echo_family  # noqa: E402
from stages.orchestrator import DeploymentUp, Orchestrator, ReplicaUp, StageOutputEvent, Submit  # noqa: E402
from stages.protocol import StageOutput, StageRequest  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def prompts(count: int, words: int) -> list[str]:
    return [" ".join(f"w{i}_{j}" for j in range(words)) for i in range(count)]


def bare_engine(texts: list[str]) -> tuple[list[float], float]:
    engine = EchoEngine()
    started = time.perf_counter()
    for index, text in enumerate(texts):
        engine.add_request(StageRequest(request_id=str(index), prompt=text))
    latencies = {}
    while engine.has_unfinished():
        for output in engine.step():
            if output.finished:
                latencies[output.request_id] = time.perf_counter() - started
    return list(latencies.values()), time.perf_counter() - started


async def driven(texts: list[str], pipeline: str) -> tuple[list[float], float]:
    async with AsyncOmni("echo", pipeline=pipeline, deploy={"max_queue": len(texts) + 1}) as omni:
        await omni.generate_all("warm up")

        async def one(text: str) -> float:
            begin = time.perf_counter()
            await omni.generate_all(text)
            return time.perf_counter() - begin

        started = time.perf_counter()
        latencies = await asyncio.gather(*(one(text) for text in texts))
        return list(latencies), time.perf_counter() - started


def core_only(requests: int, words: int, pipeline: str) -> float:
    """Microseconds per event of the pure core alone (no threads, no loop)."""
    graph = echo_family.pipeline_named(pipeline)
    core = Orchestrator()
    core.handle(DeploymentUp(deployment_id="d", pipeline=graph, deploy=DeployConfig(max_queue=requests + 1)))
    for stage in graph.stages:
        core.handle(ReplicaUp(replica_id=stage.name, deployment_id="d", stage=stage.name))
    events = [Submit(deployment_id="d", request=StageRequest(request_id=str(i), prompt="x")) for i in range(requests)]
    for stage in graph.stages:
        for seq in range(words):
            for i in range(requests):
                output = StageOutput(
                    request_id=str(i), stage_id=stage.id, seq=seq, text=" w", token_ids=[1], finished=seq == words - 1
                )
                events.append(StageOutputEvent(output=output, replica_id=stage.name))
    started = time.perf_counter()
    for event in events:
        core.handle(event)
    return (time.perf_counter() - started) / len(events) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--words", type=int, default=8)
    parser.add_argument("--pipeline", default="default", help="echo family variant: default, chain, voice")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    texts = prompts(args.requests, args.words)

    rows = []
    for _ in range(args.repeat):
        base, base_wall = bare_engine(texts)
        ours, our_wall = asyncio.run(driven(texts, args.pipeline))
        rows.append((base, base_wall, ours, our_wall))
    base, base_wall, ours, our_wall = min(rows, key=lambda row: statistics.median(row[2]))

    print(
        f"{args.requests} concurrent requests, {args.words} words each, pipeline {args.pipeline!r} (best of {args.repeat})"
    )
    print(f"{'':28}{'p50 ms':>10}{'p99 ms':>10}{'req/s':>10}")
    for name, latencies, wall in (("bare EchoEngine loop", base, base_wall), ("in-process driver", ours, our_wall)):
        print(
            f"{name:28}{percentile(latencies, 0.5) * 1e3:10.2f}{percentile(latencies, 0.99) * 1e3:10.2f}{len(latencies) / wall:10.0f}"
        )
    added = (percentile(ours, 0.5) - percentile(base, 0.5)) * 1e3
    print(f"core alone: {core_only(args.requests, args.words, args.pipeline):.1f} us per event")
    print(
        f"added latency p50: {added:.2f} ms; throughput ratio driver/bare: {(len(ours) / our_wall) / (len(base) / base_wall):.3f}"
    )


if __name__ == "__main__":
    main()
