"""A burst far over capacity against one omni deployment: is it refused quickly, or does it become
an outage?

    python benchmarks/overload.py                       # tiny Qwen2.5-Omni (var/models), 50 clients x 2
    python benchmarks/overload.py --pipeline echo-voice # the echo text -> voice pipeline, seconds instead of minutes
    python benchmarks/overload.py --clients 100 --per-client 3 --max-running 4 --max-waiting 4

On a private platform (LivePlatform: redis-server, a worker, the orchestrator, the web tier), it
measures in one run:
- the baseline: end-to-end latency of a streamed text+audio chat on the quiet system (median of 3);
- the burst: `--clients` concurrent clients sending `--per-client` streamed chats each, back to back;
  each ends completed, refused (503 before any byte streamed, with Retry-After), or failed
  (anything else: an error event mid-stream, a 5xx, a transport error); 500s are counted apart;
- the next request after the burst, against the baseline;
- dead work left: entries still in the replicas' input streams and request states in Redis.

The bar: nothing fails with a 500, refusals come quickly (they never wait for capacity), no stage
queue holds entries of ended requests, and the next request is served about as fast as on the
quiet system.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
from live_platform import REPO, LivePlatform

PROMPT = "Say something about the weather today."


def deploy_config(args) -> dict:
    limits = {"max_running": args.max_running, "max_waiting": args.max_waiting}
    if args.pipeline == "echo-voice":
        stages = {"echo": {"options": {"delay_s": 0.02}}, "voice": {**limits, "options": {"delay_s": 0.05}}}
        return {"stages": stages}
    stages = {name: dict(limits) for name in ("thinker", "talker", "code2wav")}
    stages["thinker"]["sampling"] = {"max_tokens": 16}
    stages["talker"]["sampling"] = {"max_tokens": 48}
    return {"stages": stages}


async def one_chat(client: httpx.AsyncClient, model: str) -> tuple[str, float, dict]:
    """(outcome, seconds, details): completed | refused | failed | server_error."""
    body = {"model": model, "stream": True, "modalities": ["text", "audio"],
            "audio": {"voice": "Ethan", "format": "wav"}, "messages": [{"role": "user", "content": PROMPT}]}  # fmt: skip
    if model.startswith("echo"):
        body.pop("audio")
    started = time.perf_counter()
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")
                code = _error_code(text)
                outcome = (
                    "refused" if response.status_code == 503 and code in ("overloaded", "queue_full") else "failed"
                )
                if response.status_code >= 500 and response.status_code != 503:
                    outcome = "server_error"
                return outcome, time.perf_counter() - started, {
                    "status": response.status_code, "code": code, "retry_after": response.headers.get("retry-after")
                }  # fmt: skip
            async for line in response.aiter_lines():
                if line.startswith('data: {"error"'):
                    return "failed", time.perf_counter() - started, {"status": 200, "code": _error_code(line[6:])}
                if line == "data: [DONE]":
                    return "completed", time.perf_counter() - started, {"status": 200}
            return "failed", time.perf_counter() - started, {"status": 200, "code": "no [DONE]"}
    except httpx.HTTPError as error:
        return "failed", time.perf_counter() - started, {"status": None, "code": type(error).__name__}


def _error_code(text: str) -> str | None:
    try:
        return json.loads(text)["error"].get("code")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


async def client_loop(client, model: str, per_client: int, results: list) -> None:
    for _ in range(per_client):
        results.append(await one_chat(client, model))


async def run(args, platform: LivePlatform, model: str) -> dict:
    limits = httpx.Limits(max_connections=args.clients + 10, max_keepalive_connections=args.clients + 10)
    headers = {"Authorization": f"Bearer {platform.secret}"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{platform.port}", headers=headers, limits=limits,
                                 timeout=httpx.Timeout(args.timeout)) as client:  # fmt: skip
        await one_chat(client, model)  # warm the path (first-request costs are not the baseline)
        baseline = []
        for _ in range(3):
            outcome, seconds, details = await one_chat(client, model)
            assert outcome == "completed", (outcome, details)
            baseline.append(seconds)
        results: list = []
        started = time.perf_counter()
        await asyncio.gather(*(client_loop(client, model, args.per_client, results) for _ in range(args.clients)))
        burst_s = time.perf_counter() - started
        after = []
        for _ in range(3):
            after.append(await one_chat(client, model))
    return {"baseline": baseline, "results": results, "burst_s": burst_s, "after": after}


def dead_entries(platform: LivePlatform) -> tuple[int, int]:
    """(entries in replica input streams, request states in Redis) once the burst is over."""
    import redis

    from stages import streams

    client = redis.Redis.from_url(platform.redis_url)
    entries = sum(client.xlen(key) for key in client.scan_iter(match=streams.replica_input("*"), count=1000))
    states = sum(1 for _ in client.scan_iter(match=streams.request_state("*"), count=1000))
    return entries, states


def report(args, measured: dict, dead: tuple[int, int]) -> None:
    results = measured["results"]
    outcomes = Counter(outcome for outcome, _, _ in results)
    codes = Counter(f"{outcome}:{details.get('code')}" for outcome, _, details in results if outcome != "completed")
    base = statistics.median(measured["baseline"])
    refused = sorted(seconds for outcome, seconds, _ in results if outcome == "refused")
    completed = sorted(seconds for outcome, seconds, _ in results if outcome == "completed")
    retry_after = Counter(details.get("retry_after") for outcome, _, details in results if outcome == "refused")
    after_ok = [seconds for outcome, seconds, _ in measured["after"] if outcome == "completed"]
    print(f"pipeline {args.pipeline}: {args.clients} clients x {args.per_client} streamed text+audio chats, "
          f"max_running={args.max_running} max_waiting={args.max_waiting} per stage")  # fmt: skip
    print(f"quiet-system baseline: {base:.2f} s end to end (median of 3)")
    print(f"burst of {len(results)} requests over {measured['burst_s']:.1f} s: "
          f"completed {outcomes['completed']}, refused (503) {outcomes['refused']}, failed {outcomes['failed']}, "
          f"server errors (5xx other than 503) {outcomes['server_error']}")  # fmt: skip
    if codes:
        print("  not completed, by code:", dict(codes))
    if completed:
        print(f"  completed: p50 {statistics.median(completed):.2f} s, max {completed[-1]:.2f} s "
              f"({statistics.median(completed) / base:.1f}x baseline)")  # fmt: skip
    if refused:
        print(f"  refused: p50 {statistics.median(refused) * 1000:.0f} ms, max {refused[-1] * 1000:.0f} ms to the 503; "
              f"Retry-After values {dict(retry_after)}")  # fmt: skip
    if after_ok:
        print(f"next requests after the burst: {len(after_ok)}/3 completed, first {measured['after'][0][1]:.2f} s "
              f"({measured['after'][0][1] / base:.2f}x baseline), median {statistics.median(after_ok):.2f} s")  # fmt: skip
    else:
        print(f"next requests after the burst: none completed: {measured['after']}")
    print(f"dead work left after the burst: {dead[0]} replica input stream entries, {dead[1]} request states")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pipeline", default="qwen2_5_omni", choices=["qwen2_5_omni", "echo-voice"])
    parser.add_argument("--model-dir", default=str(REPO / "var" / "models" / "qwen2_5_omni"))
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--per-client", type=int, default=2)
    parser.add_argument("--max-running", type=int, default=1, help="per stage replica (sized for a 2-core CPU)")
    parser.add_argument("--max-waiting", type=int, default=1, help="per stage replica")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a client waits for one request")
    parser.add_argument("--database", default="sqlite", choices=["sqlite", "postgres"])
    args = parser.parse_args()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    model_dir = "-" if args.pipeline == "echo-voice" else args.model_dir
    if model_dir != "-" and not Path(model_dir).is_dir():
        sys.exit(f"no checkpoint at {model_dir}: build the tiny models with `python -m stages.tiny var/models`")
    with tempfile.TemporaryDirectory(prefix="omni-overload-") as scratch:
        # a loaded CPU machine loading torch stages must not declare its replicas dead
        slow_machine = {"OMNISTAGE_HEARTBEAT_INTERVAL": "1", "OMNISTAGE_HEARTBEAT_TTL": "30"}
        with LivePlatform(Path(scratch), database=args.database, web_processes=1, extra_env=slow_machine) as platform:
            platform.deploy("overload", args.pipeline, model_dir, deploy_config(args), timeout=600)
            measured = asyncio.run(run(args, platform, "overload"))
            time.sleep(2.0)  # let the replicas' drop of ended work show in their streams
            report(args, measured, dead_entries(platform))


if __name__ == "__main__":
    main()
