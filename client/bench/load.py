"""How a level's requests go out: a closed loop of `concurrency` clients by default (each sends
its next request as soon as its last one ended), or Poisson arrivals at `request_rate` per second
with at most `concurrency` in flight (a request that arrives at a full house waits at the client,
outside its own timings). A progress bar counts requests done and failed."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable

import numpy as np
from tqdm import tqdm

from client.bench.endpoints import transport_message
from client.bench.prompts import Prompt
from client.bench.record import RequestRecord

Send = Callable[[Prompt], Awaitable[RequestRecord]]


async def guarded(send: Send, prompt: Prompt, timeout_s: float) -> RequestRecord:
    """`send(prompt)`, whatever happens: a request past its deadline or one that raised is a failed record."""
    try:
        async with asyncio.timeout(timeout_s):
            return await send(prompt)
    except TimeoutError:
        return RequestRecord().fail(f"no complete answer within {timeout_s:.0f} s (--timeout)")
    except Exception as error:  # noqa: BLE001 - one broken request must not end the run
        return RequestRecord().fail(transport_message(error))


async def run_level(send: Send, prompts: list[Prompt], *, concurrency: int, request_rate: float | None,
                    seed: int, timeout_s: float, label: str, progress: bool) -> tuple[list[RequestRecord], float]:  # fmt: skip
    """The records in prompt order and the wall seconds from the first request out to the last answer."""
    records: list[RequestRecord | None] = [None] * len(prompts)
    bar = tqdm(total=len(prompts), desc=label, unit="req", disable=not progress, file=sys.stderr, dynamic_ncols=True)
    failed = 0

    async def one(index: int) -> None:
        nonlocal failed
        records[index] = record = await guarded(send, prompts[index], timeout_s)
        if not record.ok:
            failed += 1
            bar.set_postfix(failed=failed)
        bar.update(1)

    started = time.perf_counter()
    try:
        if request_rate is None:
            await _closed_loop(one, len(prompts), concurrency)
        else:
            await _poisson(one, len(prompts), concurrency, request_rate, seed)
    finally:
        bar.close()
    return records, time.perf_counter() - started


async def _closed_loop(one: Callable[[int], Awaitable[None]], count: int, concurrency: int) -> None:
    indexes = iter(range(count))

    async def client() -> None:
        for index in indexes:  # shared: each client takes the next prompt
            await one(index)

    await asyncio.gather(*(client() for _ in range(min(concurrency, count))))


async def _poisson(one: Callable[[int], Awaitable[None]], count: int, concurrency: int, rate: float, seed: int) -> None:
    gate = asyncio.Semaphore(concurrency)
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, count)

    async def limited(index: int) -> None:
        async with gate:
            await one(index)

    tasks = []
    for index in range(count):
        if index:
            await asyncio.sleep(gaps[index])
        tasks.append(asyncio.create_task(limited(index)))
    await asyncio.gather(*tasks)
