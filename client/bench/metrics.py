"""A level's figures from its requests' records: counts, throughputs and the distribution (mean,
median, p95, p99) of every latency. Times are reported in milliseconds, RTF as a ratio."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from client.bench.record import RequestRecord

LATENCIES_MS = ("ttft", "tpot", "itl", "e2el", "audio_ttfp")  # each as <name>_ms
RATIOS = ("audio_rtf",)


def distribution(values: list[float], scale: float = 1.0) -> dict[str, float] | None:
    """mean, median, p95, p99 (linear interpolation between samples) and the count; None for no values."""
    if not values:
        return None
    array = np.asarray(values, dtype=float) * scale
    return {
        "mean": float(array.mean()),
        "median": float(np.median(array)),
        "p95": float(np.percentile(array, 95)),
        "p99": float(np.percentile(array, 99)),
        "count": int(array.size),
    }


@dataclass
class Level:
    """One concurrency level's run: its records and the wall time from its first request out to
    its last answer in."""

    concurrency: int
    request_rate: float | None
    records: list[RequestRecord]
    duration_s: float
    stages: dict[str, Any] = field(default_factory=dict)  # per-stage timings from the request history
    history_note: str | None = None

    @property
    def succeeded(self) -> list[RequestRecord]:
        return [r for r in self.records if r.ok]

    @property
    def failed(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.ok]

    def summary(self) -> dict[str, Any]:
        ok, failed, duration = self.succeeded, self.failed, self.duration_s
        text_tokens = sum(r.text_tokens or 0 for r in ok)
        audio_seconds = sum(r.audio_seconds for r in ok)
        images = sum(r.images for r in ok)
        prompt_tokens = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
        input_lens = [r.input_len for r in ok if r.input_len is not None]
        per_second = (lambda total: total / duration) if duration > 0 else (lambda total: 0.0)
        return {
            "concurrency": self.concurrency,
            "request_rate": self.request_rate,
            "requests": len(self.records),
            "successful": len(ok),
            "failed": len(failed),
            "first_error": failed[0].error if failed else None,
            "duration_s": duration,
            "request_throughput": per_second(len(ok)),
            "input_len_mean": float(np.mean(input_lens)) if input_lens else None,
            "server_prompt_tokens_mean": float(np.mean(prompt_tokens)) if prompt_tokens else None,
            "output_tokens": text_tokens,
            "output_tokens_per_s": per_second(text_tokens),
            "audio_tokens": sum(r.audio_tokens or 0 for r in ok),
            "audio_seconds": audio_seconds,
            "audio_seconds_per_s": per_second(audio_seconds),
            "images": images,
            "images_per_s": per_second(images),
            "ttft_ms": distribution([r.ttft for r in ok if r.ttft is not None], 1000),
            "tpot_ms": distribution([r.tpot for r in ok if r.tpot is not None], 1000),
            "itl_ms": distribution([gap for r in ok for gap in r.itl], 1000),
            "e2el_ms": distribution([r.e2el for r in ok], 1000),
            "audio_ttfp_ms": distribution([r.ttfp for r in ok if r.ttfp is not None], 1000),
            "audio_rtf": distribution([r.rtf for r in ok if r.rtf is not None]),
            "stages": self.stages,
            "history_note": self.history_note,
            "per_request": [record.as_dict() for record in self.records],
        }
