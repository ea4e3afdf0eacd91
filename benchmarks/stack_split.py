"""Summarise py-spy's raw (collapsed) stacks: where a process's samples go.

    py-spy record -p PID -d 10 -r 200 --threads --idle --format raw -o web.raw
    .venv/bin/python benchmarks/stack_split.py web.raw [--top 30] [--match django]

Prints, per thread, its share of the samples, then the functions that are on the stack for
the largest share of samples (inclusive time) and those that are on top of it (self time).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

# what a web process does, by the innermost frame that names it (first match wins, leaf upwards)
CATEGORIES = [
    ("database (ORM, driver)", ("django/db/", "sqlite3", "psycopg")),
    ("Redis client", ("redis/",)),
    (
        "history and usage recording",
        (
            "inference/request_run.py",
            "inference/history_log.py",
            "inference/history_events.py",
            "inference/outcome.py",
            "inference/services.py",
            "accounts/usage.py",
            "inference/metrics.py",
        ),
    ),
    (
        "auth, quota, deployment lookup",
        ("control_plane/accounts/", "inference/targets.py", "openai_compat/access.py", "control_plane/invalidation.py"),
    ),
    ("serving path client (serve, replies)", ("control_plane/orchestrator/",)),
    ("request parsing, validation, rendering", ("control_plane/openai_compat/", "stages/protocol", "msgspec", "json/")),
    ("Django handler and middleware", ("django/", "control_plane/system/")),
    ("threads (sync_to_async, executors)", ("asgiref/", "concurrent/futures", "threading.py")),
    ("HTTP server (daphne, Twisted)", ("daphne/", "twisted/")),
    ("event loop (asyncio)", ("asyncio/",)),
]

FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def frame_name(frame: str) -> str:
    match = FRAME.match(frame)
    if not match:
        return frame
    path = match["file"]
    for marker in ("site-packages/", "/lib/python3."):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    else:
        path = path.split("/wt/", 1)[-1].split("/", 1)[-1] if "/wt/" in path else path
    return f"{match['function']} ({path})"


def category_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, markers in CATEGORIES:
            if any(marker in frame for marker in markers):
                return name
    return "other"


def read(path: Path) -> list[tuple[list[str], int]]:
    stacks = []
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    return stacks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("raw", type=Path)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--match", default="", help="only functions whose name or file contains this")
    parser.add_argument("--categories", action="store_true", help="only the split by CATEGORIES")
    args = parser.parse_args()
    stacks = read(args.raw)
    total = sum(count for _, count in stacks)
    threads, inclusive, own, categories = Counter(), Counter(), Counter(), Counter()
    for frames, count in stacks:
        thread, *calls = frames
        threads[thread.split(" (")[0]] += count
        categories[category_of(calls)] += count
        names = [frame_name(frame) for frame in calls]
        for name in set(names):
            inclusive[name] += count
        if names:
            own[names[-1]] += count
    print(f"{total} samples")
    if args.categories:
        for name, count in categories.most_common():
            print(f"  {100 * count / total:5.1f}%  {name}")
        return
    for thread, count in threads.most_common():
        print(f"  {100 * count / total:5.1f}%  thread {thread}")
    for title, counter in (("inclusive", inclusive), ("self", own)):
        print(f"\n{title}:")
        rows = [(name, count) for name, count in counter.most_common() if args.match in name]
        for name, count in rows[: args.top]:
            print(f"  {100 * count / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
