"""The flags of `bench serve`, declared once for both entry points (`omnistage bench serve` and
`python manage.py bench serve`), and the options object they become."""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

ENDPOINTS = ("chat", "speech", "images", "realtime")
DEFAULT_BASE_URL = "http://127.0.0.1:8000"
DEFAULT_OUTPUT_LEN = 64


class OptionsError(ValueError):
    pass


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--base-url", default=os.environ.get("OMNISTAGE_BASE_URL", DEFAULT_BASE_URL),
        help=f"the platform's address (default: $OMNISTAGE_BASE_URL or {DEFAULT_BASE_URL})")  # fmt: skip
    add("--api-key", default=None, help="an API key with the inference scope (default: $OMNISTAGE_API_KEY)")
    add("--model", required=True, help="the deployment's name, as /v1/models lists it")
    add("--endpoint", choices=ENDPOINTS, default="chat",
        help="chat: /v1/chat/completions (SSE); speech: /v1/audio/speech (SSE); images: /v1/images/generations; "
             "realtime: spoken turns over the /v1/realtime WebSocket")  # fmt: skip
    add("--concurrency", type=int, nargs="+", default=[1], help="requests in flight; each level in turn (default: 1)")
    add("--num-prompts", type=int, nargs="+", default=None,
        help="measured requests per level: one number for every level, or one per level (default: 4 x concurrency)")  # fmt: skip
    add("--warmups", type=int, default=1, help="requests sent before the first level and not counted (default: 1)")
    add("--input-len", type=int, default=128, help="tokens of each random prompt (default: 128)")
    add("--output-len", type=int, default=None,
        help=f"text tokens each request may generate: the entry stage's max_tokens (default: {DEFAULT_OUTPUT_LEN}; "
             "realtime: the session's max_output_tokens, which bounds every stage, default the deployment's)")  # fmt: skip
    add("--audio-frames", type=int, default=None,
        help="the talker's cap: codec tokens (frames) each reply may take (default: the deployment's)")  # fmt: skip
    add("--ignore-eos", action="store_true",
        help="generate every token --output-len and --audio-frames allow (ignore end-of-sequence)")  # fmt: skip
    add("--modalities", default=None,
        help="chat output modalities, e.g. text,audio (default: what the model produces, text and audio only)")  # fmt: skip
    add("--seed", type=int, default=0, help="seed of the random prompts and of the arrival times (default: 0)")
    add("--request-rate", type=float, default=math.inf,
        help="requests per second, Poisson arrivals, at most --concurrency in flight "
             "(default: inf, a closed loop of --concurrency clients)")  # fmt: skip
    add("--tokenizer", default=None,
        help="a checkpoint directory holding tokenizer.json, for prompts of exactly --input-len tokens "
             "(default: the deployment's model_dir when the key may read it and it is on this machine)")  # fmt: skip
    add("--dataset", default=None, help='a JSONL file of prompts, one {"prompt": ...} or {"messages": [...]} a line')
    add("--speech-wav", default=None,
        help="realtime: the user's speech, a 16-bit WAV (default: espeak-ng saying 'hello, how are you')")  # fmt: skip
    add("--silence-ms", type=int, default=300, help="realtime: the server VAD's silence window (default: 300)")
    add("--extra-body", default=None, help='JSON merged into every HTTP request body, e.g. \'{"size": "512x512"}\'')
    add("--timeout", type=float, default=600.0, help="seconds one request may take in all (default: 600)")
    add("--result-json", default=None, help="write every level's figures (and the run's settings) to this file")
    add("--no-history", action="store_true", help="do not read per-stage timings from /api/requests/{id}/")
    add("--no-progress", action="store_true", help="no progress bar")


@dataclass
class ServeOptions:
    model: str
    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = None
    endpoint: str = "chat"
    concurrency: list[int] = field(default_factory=lambda: [1])
    num_prompts: list[int] | None = None
    warmups: int = 1
    input_len: int = 128
    output_len: int | None = None
    audio_frames: int | None = None
    ignore_eos: bool = False
    modalities: str | None = None
    seed: int = 0
    request_rate: float = math.inf
    tokenizer: str | None = None
    dataset: str | None = None
    speech_wav: str | None = None
    silence_ms: int = 300
    extra_body: str | None = None
    timeout: float = 600.0
    result_json: str | None = None
    no_history: bool = False
    no_progress: bool = False

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> ServeOptions:
        """From argparse's namespace (vars) or Django's options: the keys that are ours."""
        known = {f.name for f in fields(cls)}
        options = cls(**{key: value for key, value in values.items() if key in known})
        options.api_key = options.api_key or os.environ.get("OMNISTAGE_API_KEY")
        options.check()
        return options

    def check(self) -> None:
        if not self.api_key:
            raise OptionsError("no API key: pass --api-key or set OMNISTAGE_API_KEY")
        if not self.concurrency or min(self.concurrency) < 1:
            raise OptionsError("--concurrency levels must be at least 1")
        if self.num_prompts is not None:
            if len(self.num_prompts) not in (1, len(self.concurrency)) or min(self.num_prompts) < 1:
                raise OptionsError("--num-prompts takes one positive number, or one per --concurrency level")
        for name in ("input_len", "output_len", "audio_frames", "timeout"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise OptionsError(f"--{name.replace('_', '-')} must be positive, got {value}")
        if self.endpoint == "realtime" and self.audio_frames is not None:
            raise OptionsError("--audio-frames is for HTTP endpoints: a realtime session's --output-len "
                               "(max_output_tokens) bounds every stage, audio codes included")  # fmt: skip
        if self.warmups < 0:
            raise OptionsError("--warmups cannot be negative")
        if not self.request_rate > 0:
            raise OptionsError("--request-rate must be positive (inf for a closed loop)")
        self.extra()  # a bad --extra-body fails before any request

    @property
    def text_tokens(self) -> int | None:
        """The entry stage's max_tokens: --output-len, else the default (realtime: the deployment's)."""
        return self.output_len or (None if self.endpoint == "realtime" else DEFAULT_OUTPUT_LEN)

    def prompts_per_level(self) -> list[int]:
        if self.num_prompts is None:
            return [4 * level for level in self.concurrency]
        return self.num_prompts * len(self.concurrency) if len(self.num_prompts) == 1 else list(self.num_prompts)

    @property
    def arrival_rate(self) -> float | None:
        return None if math.isinf(self.request_rate) else self.request_rate

    def extra(self) -> dict[str, Any]:
        if not self.extra_body:
            return {}
        try:
            body = json.loads(self.extra_body)
        except json.JSONDecodeError as error:
            raise OptionsError(f"--extra-body is not JSON: {error}") from None
        if not isinstance(body, dict):
            raise OptionsError("--extra-body must be a JSON object")
        return body

    def settings(self) -> dict[str, Any]:
        """The run's settings for the result file (the key left out)."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "api_key"}
        values["request_rate"] = self.arrival_rate
        return values
