"""Soak: many concurrent SSE streams to the tiny LLM for a bounded time, then the promises.

    .venv/bin/python benchmarks/soak.py [--streams 500] [--minutes 5] [--database sqlite|postgres]
        [--max-tokens 16] [--warm-up-s 60] [--web-processes N]

Starts a private platform (benchmarks/live_platform.py: redis-server, a worker, the
orchestrator, the web tier) on loopback, deploys the tiny Qwen2 LLM (var/models/qwen2; build it
with `python -m stages.tiny var/models`), and keeps `--streams` clients streaming
/v1/chat/completions for `--minutes`: each client sends its next request when the last one
ended, and waits the Retry-After of a 429/503. Then it checks, and prints PASS/FAIL for each:

- errors: no answer but 200, or 429/503 with a Retry-After header (a quota or the capacity);
- history: every request has its row, in its final state (200: completed; refused: failed
  with its status), waiting up to `--settle-s` for rows written off the request path;
- usage: the usage rows' text tokens equal, in total and per request, what the streams reported;
- memory: the RSS of every platform process stays within 10% of its value at the end of the
  warm-up (sampled every 5 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from http_load import Connection
from live_platform import DEFAULT_POSTGRES, REPO, LivePlatform

RSS_TOLERANCE = 0.10
RSS_SAMPLE_S = 5.0


@dataclass
class Tally:
    statuses: Counter = field(default_factory=Counter)
    bad: list[str] = field(default_factory=list)  # answers outside the promise
    completed: dict[str, tuple[int, int]] = field(default_factory=dict)  # request id -> (prompt, completion) tokens
    refused: int = 0
    sent: int = 0
    first_chunk_s: list[float] = field(default_factory=list)


def parse_stream(body: bytes) -> tuple[str | None, dict | None, bool]:
    """(request id, usage, saw [DONE]) of an SSE body."""
    request_id, usage, done = None, None, False
    for line in body.decode(errors="replace").split("\n"):  # not splitlines(): text may hold U+2028, U+0085
        line = line.rstrip("\r")
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            done = True
            continue
        event = json.loads(data)
        request_id = event.get("id", request_id)
        if event.get("usage"):
            usage = event["usage"]
    return request_id, usage, done


async def client(port: int, body: bytes, headers: dict[str, str], deadline: float, tally: Tally) -> None:
    conn = Connection("127.0.0.1", port)
    try:
        while time.monotonic() < deadline:
            tally.sent += 1
            try:
                reply = await conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
            except (OSError, asyncio.IncompleteReadError) as error:
                tally.bad.append(f"connection error: {error!r}")
                await conn.close()
                continue
            tally.statuses[reply.status] += 1
            if reply.status == 200:
                request_id, usage, done = parse_stream(reply.body)
                if not done or request_id is None or usage is None:
                    tally.bad.append(f"stream without [DONE]/id/usage: {reply.body[-300:]!r}")
                    continue
                tally.completed[request_id] = (usage["prompt_tokens"], usage["completion_tokens"])
                tally.first_chunk_s.append(reply.first_byte_s)
            elif reply.status in (429, 503) and "retry-after" in reply.headers:
                tally.refused += 1
                await asyncio.sleep(min(float(reply.headers["retry-after"]), 10.0))
            else:
                tally.bad.append(f"HTTP {reply.status} {reply.headers.get('retry-after')!r}: {reply.body[:300]!r}")
    finally:
        await conn.close()


async def sample_rss(pids: dict[str, int], until: float, samples: dict[str, list[tuple[float, int]]]) -> None:
    import psutil

    started = time.monotonic()
    while time.monotonic() < until:
        for name, pid in pids.items():
            try:
                samples.setdefault(name, []).append((time.monotonic() - started, psutil.Process(pid).memory_info().rss))
            except psutil.NoSuchProcess:
                samples.setdefault(name, []).append((time.monotonic() - started, 0))
        await asyncio.sleep(RSS_SAMPLE_S)


async def soak(platform: LivePlatform, args) -> tuple[Tally, dict]:
    body = json.dumps({
        "model": "soak-llm",
        "messages": [{"role": "user", "content": "Say something about the sea."}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": args.max_tokens,
    }).encode()  # fmt: skip
    headers = {"Authorization": f"Bearer {platform.secret}", "Content-Type": "application/json"}
    tally = Tally()
    deadline = time.monotonic() + args.minutes * 60
    samples: dict[str, list[tuple[float, int]]] = {}
    sampler = asyncio.create_task(sample_rss(platform.pids(), deadline, samples))
    await asyncio.gather(*(client(platform.port, body, headers, deadline, tally) for _ in range(args.streams)))
    await sampler
    return tally, samples


def check_history(tally: Tally, settle_s: float) -> tuple[bool, str]:
    from control_plane.inference.models import InferenceRequest

    deadline = time.monotonic() + settle_s
    while True:
        rows = dict(InferenceRequest.objects.filter(deployment_name="soak-llm").values_list("request_id", "status"))
        missing = [rid for rid in tally.completed if rid not in rows]
        not_final = [rid for rid in tally.completed if rows.get(rid) not in (None, "completed")]
        refused_rows = sum(1 for status in rows.values() if status == "failed")
        complete = not missing and not not_final and len(rows) >= tally.sent - len(tally.bad)
        if complete or time.monotonic() > deadline:
            break
        time.sleep(1)
    detail = (f"{len(rows)} rows for {tally.sent} requests sent ({len(tally.completed)} completed, {tally.refused} "
              f"refused, {refused_rows} failed rows); missing {len(missing)}, not completed {len(not_final)}")  # fmt: skip
    return complete, detail


def check_usage(tally: Tally) -> tuple[bool, str]:
    from control_plane.accounts.models import UsageRecord

    rows = {
        request_id: (tokens_in, tokens_out)
        for request_id, tokens_in, tokens_out in UsageRecord.objects.filter(deployment="soak-llm").values_list(
            "request_id", "text_tokens_in", "text_tokens_out"
        )
    }
    sent_in = sum(tokens[0] for tokens in tally.completed.values())
    sent_out = sum(tokens[1] for tokens in tally.completed.values())
    recorded_in = sum(rows.get(rid, (0, 0))[0] for rid in tally.completed)
    recorded_out = sum(rows.get(rid, (0, 0))[1] for rid in tally.completed)
    differing = [rid for rid, tokens in tally.completed.items() if rows.get(rid) != tokens]
    ok = not differing and (sent_in, sent_out) == (recorded_in, recorded_out)
    return ok, (f"streams reported {sent_in} prompt + {sent_out} completion tokens; usage rows {recorded_in} + "
                f"{recorded_out}; {len(differing)} requests differ")  # fmt: skip


def check_rss(samples: dict[str, list[tuple[float, int]]], warm_up_s: float) -> tuple[bool, list[str]]:
    ok, lines = True, []
    for name, series in sorted(samples.items()):
        after = [rss for at, rss in series if at >= warm_up_s]
        if len(after) < 2:
            lines.append(f"{name}: too few samples after the warm-up")
            ok = False
            continue
        base = after[0]
        worst = max(abs(rss - base) / base for rss in after) if base else float("inf")
        flat = worst <= RSS_TOLERANCE
        ok &= flat
        lines.append(f"{name:<16} {base / 2**20:8.1f} MiB -> {after[-1] / 2**20:8.1f} MiB, worst {worst:+.1%} "
                     f"{'ok' if flat else 'NOT FLAT'}")  # fmt: skip
    return ok, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--warm-up-s", type=float, default=60.0, help="RSS is compared from this point on")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--settle-s", type=float, default=60.0, help="wait for history rows written off the path")
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--postgres-server", default=DEFAULT_POSTGRES)
    parser.add_argument("--web-processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--model-dir", default=str(REPO / "var" / "models" / "qwen2"))
    args = parser.parse_args()
    if not (Path(args.model_dir) / "config.json").exists():
        raise SystemExit(f"no tiny checkpoint at {args.model_dir}: run `python -m stages.tiny var/models` first")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        with LivePlatform(Path(scratch), database=args.database, postgres_server=args.postgres_server,
                          web_processes=args.web_processes) as platform:  # fmt: skip
            depth = max(64, args.streams)  # every stream is queued, none refused for capacity
            platform.deploy(
                "soak-llm", "llm", args.model_dir, {"max_queue": depth, "stages": {"llm": {"max_waiting": depth}}}
            )
            started = time.monotonic()
            tally, samples = asyncio.run(soak(platform, args))
            wall = time.monotonic() - started
            history_ok, history = check_history(tally, args.settle_s)
            usage_ok, usage = check_usage(tally)
    rss_ok, rss = check_rss(samples, args.warm_up_s)
    errors_ok = not tally.bad
    print(f"{args.streams} SSE streams for {wall:.0f} s, database {args.database}, {args.web_processes} web "
          f"process(es); load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after")  # fmt: skip
    print(f"requests {tally.sent}: {dict(tally.statuses)}; {len(tally.completed) / wall:.1f} completed/s")
    if tally.first_chunk_s:
        ordered = sorted(tally.first_chunk_s)
        print(f"time to the first SSE chunk: p50 {ordered[len(ordered) // 2] * 1000:.0f} ms, "
              f"p99 {ordered[int(len(ordered) * 0.99)] * 1000:.0f} ms")  # fmt: skip
    print(f"{'PASS' if errors_ok else 'FAIL'} errors: {len(tally.bad)} outside 200 / 429-503 with Retry-After")
    for line in tally.bad[:5]:
        print(f"     {line}")
    print(f"{'PASS' if history_ok else 'FAIL'} history: {history}")
    print(f"{'PASS' if usage_ok else 'FAIL'} usage: {usage}")
    print(
        f"{'PASS' if rss_ok else 'FAIL'} memory after {args.warm_up_s:.0f} s of warm-up (within {RSS_TOLERANCE:.0%}):"
    )
    for line in rss:
        print(f"     {line}")
    raise SystemExit(0 if errors_ok and history_ok and usage_ok and rss_ok else 1)


if __name__ == "__main__":
    main()
