"""Per-stage timings from the platform's request history (GET /api/requests/{id}/): what each
stage took and when it first produced output, plus the server's own TTFT/TTFP/E2EL, for the
requests of a level. Skipped, with a note saying why, when the key may not read them."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from client.bench.endpoints import error_message, transport_message
from client.bench.metrics import distribution

SERVER_TIMINGS = {"queue_s": "queue_ms", "ttft_s": "ttft_ms", "tpot_s": "tpot_ms", "ttfp_s": "audio_ttfp_ms",
                  "e2el_s": "e2el_ms"}  # fmt: skip
FETCHES_AT_ONCE = 8


async def read_rows(http: httpx.AsyncClient, request_ids: list[str]) -> tuple[list[dict], str | None]:
    """The history rows of `request_ids`, or none and the reason."""
    if not request_ids:
        return [], "no request ids to look up"
    try:
        first = await http.get(f"/api/requests/{request_ids[0]}/")
    except httpx.HTTPError as error:
        return [], f"request history unreachable ({transport_message(error)})"
    if first.status_code != 200:
        return [], f"request history not read ({error_message(first)})"
    gate = asyncio.Semaphore(FETCHES_AT_ONCE)

    async def one(request_id: str) -> dict | None:
        async with gate:
            try:
                response = await http.get(f"/api/requests/{request_id}/")
            except httpx.HTTPError:
                return None
            return response.json() if response.status_code == 200 else None

    rest = await asyncio.gather(*(one(request_id) for request_id in request_ids[1:]))
    rows = [first.json(), *(row for row in rest if row is not None)]
    missing = len(request_ids) - len(rows)
    return rows, (f"{missing} of {len(request_ids)} history rows could not be read" if missing else None)


def stage_summary(rows: list[dict], stage_order: list[str]) -> dict[str, Any]:
    """{"server": {ttft_ms...}, "stages": {name: {"duration_ms", "first_output_ms"}}} over `rows`."""
    server: dict[str, Any] = {
        label: distribution([row[key] for row in rows if row.get(key) is not None], 1000)
        for key, label in SERVER_TIMINGS.items()
    }
    server["audio_rtf"] = distribution([row["rtf"] for row in rows if row.get("rtf") is not None])
    names = [name for name in stage_order if any(name in (row.get("stage_metrics") or {}) for row in rows)]
    stages = {
        name: {
            f"{measure}_ms": distribution(
                [
                    row["stage_metrics"][name][f"{measure}_s"]
                    for row in rows
                    if f"{measure}_s" in (row.get("stage_metrics") or {}).get(name, {})
                ],
                1000,
            )  # fmt: skip
            for measure in ("duration", "first_output")
        }
        for name in names
    }
    return {"requests": len(rows), "server": server, "stages": stages}
