"""`bench serve`: measure a running deployment through the API its users call.

    omnistage bench serve --base-url http://127.0.0.1:8000 --model tiny-omni --concurrency 1 4 \\
        --modalities text,audio --input-len 32 --output-len 16 --audio-frames 100 --result-json out.json

It checks the key and the model first (/v1/models/{model}), makes its prompts (random ones of an
exact token length, or --dataset), sends --warmups requests that are not counted, then runs each
--concurrency level in turn and prints its table. Exit status: 0 when every request succeeded,
1 when the run could not start (wrong key, unknown model, unreachable server, a setting the
server refuses), 2 when it ran and some requests failed (their first error is printed).
"""

from __future__ import annotations

import asyncio
import sys
import time
import wave
from typing import Any, TextIO

import httpx

from client.bench import endpoints
from client.bench.endpoints import Shape, error_message, transport_message
from client.bench.history import read_rows, stage_summary
from client.bench.load import Send, run_level
from client.bench.metrics import Level
from client.bench.options import OptionsError, ServeOptions
from client.bench.prompts import Prompt, PromptError, dataset_prompts, random_prompts
from client.bench.realtime import SpeechError, speech_samples, spoken_turn
from client.bench.report import level_table, overview, write_result
from client.bench.tokenizer import LocalTokenizer, tokenizer_file

OK, CANNOT_START, REQUESTS_FAILED, INTERRUPTED = 0, 1, 2, 130
RUNNABLE_MODALITIES = ("text", "audio")


class BenchError(Exception):
    """The run cannot start; the message says why (the server's own words where it answered)."""


def run(options: ServeOptions, out: TextIO = sys.stdout) -> int:
    try:
        return asyncio.run(serve(options, out))
    except (BenchError, OptionsError, PromptError, SpeechError, OSError, wave.Error) as error:
        print(f"bench serve: {error}", file=sys.stderr)
        return CANNOT_START
    except KeyboardInterrupt:
        print("bench serve: interrupted", file=sys.stderr)
        return INTERRUPTED


async def serve(options: ServeOptions, out: TextIO) -> int:
    limits = httpx.Limits(max_connections=max(options.concurrency) + 16, max_keepalive_connections=None)
    timeout = httpx.Timeout(options.timeout, connect=30)
    headers = {"Authorization": f"Bearer {options.api_key}"}
    async with httpx.AsyncClient(base_url=options.base_url, headers=headers, timeout=timeout, limits=limits) as http:
        model = await describe_model(http, options)
        shape = request_shape(options, model)
        tokenizer, tokenizer_note = await find_tokenizer(http, options)
        sizes = options.prompts_per_level()
        prompts = make_prompts(options, tokenizer, options.warmups + sum(sizes))
        send = sender(options, shape, http)
        title = f"{options.model} · {options.endpoint}" + (
            f" ({','.join(shape.modalities)})" if options.endpoint == "chat" else ""
        )
        print(f"bench serve: {title} at {options.base_url}; prompts: {prompt_note(options, tokenizer_note)}", file=out)
        await warm_up(send, prompts[: options.warmups], options)
        levels, offset = [], options.warmups
        for concurrency, size in zip(options.concurrency, sizes, strict=True):
            level = await measure(send, prompts[offset : offset + size], concurrency, options)
            offset += size
            if not options.no_history:
                await add_stage_timings(http, level, model)
            levels.append(level.summary())
            print(level_table(levels[-1], title), file=out, flush=True)
    if len(levels) > 1:
        print(overview(levels), file=out)
    if options.result_json:
        write_result(options.result_json, result_document(options, model, shape, tokenizer_note, levels))
    failed = sum(level["failed"] for level in levels)
    if failed:
        first = next(level["first_error"] for level in levels if level["failed"])
        print(f"bench serve: {failed} request(s) failed; the first: {first}", file=sys.stderr)
        return REQUESTS_FAILED
    return OK


async def describe_model(http: httpx.AsyncClient, options: ServeOptions) -> dict[str, Any]:
    """/v1/models/{model}: the key works and the model is served, or the server's reason why not."""
    try:
        response = await http.get(f"/v1/models/{options.model}")
    except httpx.HTTPError as error:
        raise BenchError(f"cannot reach {options.base_url}: {transport_message(error)}") from None
    if response.status_code != 200:
        raise BenchError(error_message(response))
    return response.json()


def request_shape(options: ServeOptions, model: dict[str, Any]) -> Shape:
    stages = model.get("stages") or []
    return Shape(
        model=options.model,
        modalities=chat_modalities(options, model),
        output_len=options.text_tokens,
        ignore_eos=options.ignore_eos,
        later_stages=talker_cap(options, model),
        stage_count=len(stages),
        extra_body=options.extra(),
    )


def chat_modalities(options: ServeOptions, model: dict[str, Any]) -> tuple[str, ...]:
    if options.modalities:
        return tuple(m.strip() for m in options.modalities.split(",") if m.strip())
    produced = [m for m in model.get("modalities") or [] if m in RUNNABLE_MODALITIES]
    return tuple(produced or model.get("modalities") or ["text"])


def talker_cap(options: ServeOptions, model: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """--audio-frames as the sampling of the talker: the first AR stage after the entry."""
    if options.audio_frames is None:
        return {}
    stages = model.get("stages") or []
    talker = next((index for index, stage in enumerate(stages) if index and stage.get("kind") == "ar"), None)
    if talker is None:
        names = ", ".join(f"{s.get('name')} ({s.get('kind')})" for s in stages) or "unknown"
        raise BenchError(f"--audio-frames caps a talker stage, and {options.model} has none (its stages: {names})")
    sampling: dict[str, Any] = {"max_tokens": options.audio_frames}
    if options.ignore_eos:
        sampling["ignore_eos"] = True
    return {talker: sampling}


async def find_tokenizer(http: httpx.AsyncClient, options: ServeOptions) -> tuple[LocalTokenizer | None, str]:
    """--tokenizer, else the deployment's model_dir when the key may read it and it is on this machine."""
    if options.tokenizer:
        tokenizer = LocalTokenizer.from_dir(options.tokenizer)
        return tokenizer, f"tokenizer {tokenizer.path}"
    try:
        response = await http.get(f"/api/deployments/{options.model}/")
    except httpx.HTTPError:
        response = None
    if response is not None and response.status_code == 200:
        model_dir = response.json().get("model_dir") or ""
        if tokenizer_file(model_dir):
            tokenizer = LocalTokenizer.from_dir(model_dir)
            return tokenizer, f"tokenizer {tokenizer.path} (the deployment's)"
    return None, "no tokenizer"


def prompt_note(options: ServeOptions, tokenizer_note: str) -> str:
    if options.endpoint == "realtime":
        return f"spoken turns ({options.speech_wav or 'espeak-ng'}), server VAD {options.silence_ms} ms"
    if options.dataset:
        return f"{options.dataset}; {tokenizer_note}"
    if tokenizer_note == "no tokenizer":
        return (f"{options.input_len} random words, about one token each (no tokenizer: pass --tokenizer for "
                "exact lengths; the server's own prompt token count is reported)")  # fmt: skip
    return f"random, exactly {options.input_len} tokens, seed {options.seed}; {tokenizer_note}"


def make_prompts(options: ServeOptions, tokenizer: LocalTokenizer | None, count: int) -> list[Prompt]:
    if options.endpoint == "realtime":
        return [Prompt(text="(spoken)")] * count
    if options.dataset:
        return dataset_prompts(options.dataset, count, tokenizer)
    return random_prompts(count, options.input_len, options.seed, tokenizer)


def sender(options: ServeOptions, shape: Shape, http: httpx.AsyncClient) -> Send:
    if options.endpoint == "realtime":
        speech = speech_samples(options.speech_wav)
        session: dict[str, Any] = {"type": "realtime", "output_modalities": ["audio" if "audio" in shape.modalities
                                                                             else "text"]}  # fmt: skip
        if options.output_len:
            session["max_output_tokens"] = options.output_len

        async def turn(prompt: Prompt) -> Any:
            return await spoken_turn(options.base_url, options.api_key, options.model, speech,
                                     silence_ms=options.silence_ms, session=session, timeout_s=options.timeout)  # fmt: skip

        return turn
    request = {"chat": endpoints.chat, "speech": endpoints.speech, "images": endpoints.images}[options.endpoint]
    return lambda prompt: request(http, shape, prompt)


async def warm_up(send: Send, prompts: list[Prompt], options: ServeOptions) -> None:
    if not prompts:
        return
    records, _ = await run_level(send, prompts, concurrency=min(len(prompts), max(options.concurrency)),
                                 request_rate=None, seed=options.seed, timeout_s=options.timeout,
                                 label="warm-up", progress=not options.no_progress)  # fmt: skip
    failed = [record for record in records if not record.ok]
    if len(failed) == len(records):
        raise BenchError(f"every warm-up request failed: {failed[0].error}")
    if failed:
        print(f"bench serve: {len(failed)} warm-up request(s) failed: {failed[0].error}", file=sys.stderr)


async def measure(send: Send, prompts: list[Prompt], concurrency: int, options: ServeOptions) -> Level:
    records, duration = await run_level(
        send, prompts, concurrency=concurrency, request_rate=options.arrival_rate, seed=options.seed + concurrency,
        timeout_s=options.timeout, label=f"concurrency {concurrency}", progress=not options.no_progress,
    )  # fmt: skip
    return Level(concurrency, options.arrival_rate, records, duration)


async def add_stage_timings(http: httpx.AsyncClient, level: Level, model: dict[str, Any]) -> None:
    ids = [record.request_id for record in level.succeeded if record.request_id]
    rows, level.history_note = await read_rows(http, ids)
    if rows:
        level.stages = stage_summary(rows, [stage.get("name") for stage in model.get("stages") or []])


def result_document(options: ServeOptions, model: dict[str, Any], shape: Shape, tokenizer_note: str,
                    levels: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    return {
        "tool": "omnistage bench serve",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "model": model,
        "settings": options.settings(),
        "request": {
            "modalities": list(shape.modalities),
            "max_tokens": shape.output_len,
            "sampling_params_list": shape.sampling_params_list(),
        },
        "prompts": tokenizer_note,
        "levels": levels,
    }
