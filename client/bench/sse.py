"""Server-sent events from a streamed httpx response: (event name, data) pairs as they arrive."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx


async def sse_events(response: httpx.Response) -> AsyncIterator[tuple[str | None, str]]:
    """Each event's name (None without an `event:` line) and its data lines joined; comments skipped."""
    name: str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield name, "\n".join(data)
            name, data = None, []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield name, "\n".join(data)
