"""What a run prints: one table per level as it ends, a line per level at the end, and the
result file (`--result-json`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

ROWS = (("TTFT (ms)", "ttft_ms"), ("TPOT (ms)", "tpot_ms"), ("ITL (ms)", "itl_ms"), ("E2EL (ms)", "e2el_ms"),
        ("Audio TTFP (ms)", "audio_ttfp_ms"), ("Audio RTF", "audio_rtf"))  # fmt: skip
COLUMNS = ("mean", "median", "p95", "p99")


def number(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def level_table(summary: dict[str, Any], title: str) -> str:
    s = summary
    arrivals = "closed loop" if s["request_rate"] is None else f"Poisson {s['request_rate']:g} req/s"
    heading = f" {title} · concurrency {s['concurrency']} · {arrivals} "
    lines = [f"{heading:=^78}"]
    lines.append(f"{'Successful requests:':<34}{s['successful']}")
    lines.append(f"{'Failed requests:':<34}{s['failed']}")
    lines.append(f"{'Duration (s):':<34}{number(s['duration_s'])}")
    lines.append(f"{'Request throughput (req/s):':<34}{number(s['request_throughput'], 3)}")
    lines.append(f"{'Output tokens/s:':<34}{number(s['output_tokens_per_s'])}  ({s['output_tokens']} text tokens)")
    lines.append(
        f"{'Audio seconds/s:':<34}{number(s['audio_seconds_per_s'], 3)}  ({number(s['audio_seconds'])} s of audio)"
    )
    if s["images"]:
        lines.append(f"{'Images/s:':<34}{number(s['images_per_s'], 3)}  ({s['images']} images)")
    if s["input_len_mean"] is not None or s["server_prompt_tokens_mean"] is not None:
        prompt = number(s["input_len_mean"], 1) if s["input_len_mean"] is not None else "- (no tokenizer)"
        server = number(s["server_prompt_tokens_mean"], 1)
        lines.append(f"{'Input tokens per request:':<34}prompt {prompt}, server {server} (template included)")
    lines.append(f"{'':<18}" + "".join(f"{name:>12}" for name in COLUMNS) + f"{'n':>7}")
    for label, key in ROWS:
        values = s[key]
        cells = "".join(f"{number(values[c] if values else None):>12}" for c in COLUMNS)
        lines.append(f"{label:<18}{cells}{(values or {}).get('count', 0):>7}")
    lines += _stage_lines(s)
    if s["failed"]:
        lines.append(f"first error: {s['first_error']}")
    return "\n".join(lines)


def _stage_lines(s: dict[str, Any]) -> list[str]:
    history = s.get("stages") or {}
    if not history:
        return [f"per stage: {s['history_note']}"] if s.get("history_note") else []
    heading = f" per stage, from the request history ({history['requests']} requests) "
    lines = [f"{heading:-^78}", f"{'':<18}{'duration mean':>16}{'p95':>10}{'first output mean':>20}{'p95':>10}"]
    for name, measures in history["stages"].items():
        duration, first = measures["duration_ms"] or {}, measures["first_output_ms"] or {}
        lines.append(f"{name + ' (ms)':<18}{number(duration.get('mean')):>16}{number(duration.get('p95')):>10}"
                     f"{number(first.get('mean')):>20}{number(first.get('p95')):>10}")  # fmt: skip
    server = history["server"]
    means = [(label, (server.get(key) or {}).get("mean")) for label, key in
             (("queue", "queue_ms"), ("TTFT", "ttft_ms"), ("TTFP", "audio_ttfp_ms"), ("E2EL", "e2el_ms"))]  # fmt: skip
    lines.append("server-side mean (ms): " + ", ".join(f"{label} {number(value)}" for label, value in means))
    if s.get("history_note"):
        lines.append(f"note: {s['history_note']}")
    return lines


def overview(summaries: list[dict[str, Any]]) -> str:
    header = (f"{'conc':>5}{'ok':>6}{'failed':>7}{'req/s':>9}{'tok/s':>9}{'audio s/s':>10}{'TTFT p50':>10}"
              f"{'TPOT p50':>10}{'E2EL p50':>10}{'TTFP p50':>10}{'RTF p50':>9}")  # fmt: skip
    lines = [header]
    for s in summaries:
        median = {key: (s[key] or {}).get("median") for key in ("ttft_ms", "tpot_ms", "e2el_ms", "audio_ttfp_ms",
                                                                  "audio_rtf")}  # fmt: skip
        lines.append(f"{s['concurrency']:>5}{s['successful']:>6}{s['failed']:>7}{number(s['request_throughput'], 3):>9}"
                     f"{number(s['output_tokens_per_s'], 1):>9}{number(s['audio_seconds_per_s'], 3):>10}"
                     f"{number(median['ttft_ms'], 1):>10}{number(median['tpot_ms'], 1):>10}"
                     f"{number(median['e2el_ms'], 1):>10}{number(median['audio_ttfp_ms'], 1):>10}"
                     f"{number(median['audio_rtf'], 3):>9}")  # fmt: skip
    return "\n".join(lines)


def write_result(path: str | Path, result: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(result, indent=2) + "\n")
