"""A small HTTP/1.1 load client for the benchmarks: keep-alive connections over asyncio streams.

httpx spends more CPU per request than the web tier it measures (on a 2-core machine the
client and the server share the cores), so the benchmarks send raw HTTP/1.1 and read only
what they need: the status, the headers, and a Content-Length or chunked body.

    async with Connection("127.0.0.1", port) as conn:
        reply = await conn.request("GET", "/health")
        reply.status, reply.headers["content-type"], reply.body

`load(...)` runs `total` requests over `concurrency` connections and returns each request's
latency and the wall time.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes = b""
    chunks: list[bytes] = field(default_factory=list)  # a chunked body, one entry per chunk as it arrived
    first_byte_s: float = 0.0  # seconds from sending to the first body chunk

    def json(self):
        return json.loads(self.body)


class Connection:
    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> Connection:
        await self.open()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=2**22)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except OSError:
                pass
            self.writer = None

    async def request(
        self, method: str, path: str, *, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> Reply:
        if self.writer is None:
            await self.open()
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}", f"Content-Length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        started = time.perf_counter()
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        reply = await self._read_reply(started)
        if reply.headers.get("connection", "").lower() == "close":
            await self.close()
        return reply

    async def _read_reply(self, started: float) -> Reply:
        head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in header_lines:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        reply = Reply(int(status_line.split(" ", 2)[1]), headers)
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if not reply.chunks:
                    reply.first_byte_s = time.perf_counter() - started
                if size == 0:
                    await self.reader.readuntil(b"\r\n")
                    break
                reply.chunks.append(await self.reader.readexactly(size))
                await self.reader.readexactly(2)
            reply.body = b"".join(reply.chunks)
        elif "content-length" in headers:
            reply.body = await self.reader.readexactly(int(headers["content-length"]))
            reply.first_byte_s = time.perf_counter() - started
        else:  # HTTP/1.0-style: the body runs to the end of the connection
            reply.body = await self.reader.read()
            reply.first_byte_s = time.perf_counter() - started
            await self.close()
        return reply


async def load(
    host: str,
    port: int,
    method: str,
    path: str,
    *,
    total: int,
    concurrency: int,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    check: Callable[[Reply], None] | None = None,
) -> tuple[list[float], float]:
    """`total` requests over `concurrency` keep-alive connections: (latencies in s, wall time in s)."""
    latencies: list[float] = []
    remaining = [total]

    async def worker() -> None:
        async with Connection(host, port) as conn:
            while remaining[0] > 0:
                remaining[0] -= 1
                started = time.perf_counter()
                reply = await conn.request(method, path, body=body, headers=headers)
                latencies.append(time.perf_counter() - started)
                if check is not None:
                    check(reply)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, total))))
    return latencies, time.perf_counter() - started


def expect_status(*statuses: int) -> Callable[[Reply], None]:
    def check(reply: Reply) -> None:
        if reply.status not in statuses:
            raise AssertionError(f"HTTP {reply.status}: {reply.body[:500]!r}")

    return check
