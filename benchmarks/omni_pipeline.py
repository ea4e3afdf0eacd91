"""Omnistage's omni pipeline vs transformers' `generate(return_audio=True)` one request at a time.

    python benchmarks/omni_pipeline.py --device cpu --model tiny [--family qwen2_5_omni] [--text 32 --codes 64]
    python benchmarks/omni_pipeline.py --device cuda --model 7b-shaped --text 128 --codes 512
    python benchmarks/omni_pipeline.py --device cuda --model 7b-shaped --text 128 --codes 512 \
        --warmups 2 --code2wav-autocast dit --chunk 96 --compile --code2wav-compile   # the GPU recipe
    python benchmarks/omni_pipeline.py --device cuda --family qwen3_omni --model 30b-shaped --prompt-tokens 100 \
        --text 100 --codes 300 --concurrency 1 8 16 32   # Qwen3-Omni-30B-A3B's bars
    python benchmarks/omni_pipeline.py --device cuda --model 7b-shaped --text 128 --codes 512 --talker-sampling

Prints, for transformers (sequential) and Omnistage at concurrency 1, 4 and 8: requests/s, TTFT, TTFP,
E2EL and RTF (wall seconds per second of audio), the mean per-stage durations, plus the throughput ratio
against transformers. Both sides decode greedily with fixed lengths (min = max tokens) so the work is the
same; `--talker-sampling` makes both talkers sample as the platform's does for an API request (the
family's talker defaults: top_k, top_p, temperature, repetition penalty), still at fixed lengths; the
config line printed first says which. `--model 7b-shaped` serves the real-shape directory
`qwen2_5_omni_7b` (`python -m stages.tiny --real-shapes`: Qwen2.5-Omni-7B's published configs, no
weights) with `load_format: dummy`: every stage, and transformers' model, builds on the GPU with seeded
random bf16 weights, no shards written (needs a GPU); token2wav runs in `--code2wav-dtype` (float32 by default) on both sides; `--code2wav-autocast dit` runs Omnistage's DiT under bf16 autocast
(transformers stays in float32), and new token2wav graph captures are logged. `--compile` and
`--code2wav-compile` turn on `options.compile` (AR stages) and `token2wav_compile`, `--vocoder-compile`
`token2wav_vocoder_compile` (BigVGAN's activations fused and compiled), `--block-attention`
`token2wav_block_attention` (the DiT's attention block by block, without masks); `--log-windows`
logs each code2wav window's decode time and when it ran, which shows whether code2wav keeps up.
`--model 30b-shaped` (with `--family qwen3_omni`) serves `qwen3_omni_30b_a3b` the same way; transformers'
copy runs first and is freed before Omnistage loads (both do not fit at once). `--prompt-tokens N` pads
the user message to an N-token prompt; `--audio-seconds S` makes it an S-second audio clip instead (as
a realtime turn's prompt). Every stage's max batch is the largest concurrency; failed
requests are counted per concurrency. `--trace-at N` runs one extra round at concurrency N under the
torch profiler and prints how busy each CUDA stream (each stage steps on its own) was per 250 ms, with
its costliest kernels: who holds the GPU while first audio waits, then what each host thread did with the
CUDA runtime (benchmarks/trace_threads.py). `--py-spy-at N` records, during concurrency N's timed run, which
threads hold the GIL and where (py-spy's raw stacks per thread, to $OUT or the working directory).
`--step-log` times every thinker and talker step by how it ran, graph replay or eager
(benchmarks/step_log.py), and lists each step of a round's first 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import step_log  # noqa: E402 - beside this script


def model_dir_for(args, root: Path) -> Path:
    """The checkpoint of `args.model` under `root`: the tiny one (weights written, a few MB), or the
    real-shape directory `qwen2_5_omni_7b` (configs only: every stage builds with `load_format: dummy`);
    an earlier run's is reused."""
    from stages.tiny import REAL_SHAPES, build_all

    if args.model == "tiny":
        return build_all(root, only=[args.family])[args.family]
    name, family = REAL_SHAPED[args.model]
    if args.family != family:
        raise SystemExit(f"--model {args.model} is only defined for --family {family}")
    return build_all(root, only=[name], builders=REAL_SHAPES)[name]


REAL_SHAPED = {"7b-shaped": ("qwen2_5_omni_7b", "qwen2_5_omni"), "30b-shaped": ("qwen3_omni_30b_a3b", "qwen3_omni")}
"""--model -> (real-shape directory of `python -m stages.tiny --real-shapes`, its family)."""


def load_format(args) -> str:
    return "auto" if args.model == "tiny" else "dummy"


def transformers_run(args, model_dir: Path, messages: list[dict], n_text: int, n_codes: int, repeats: int):
    import torch

    family, device = args.family, args.device
    if family == "qwen2_5_omni":
        from transformers import Qwen2_5OmniForConditionalGeneration as Model

        from stages.models.qwen2_5_omni import processor

        kwargs = {"speaker": "Chelsie", "talker_eos_token_id": [8292, 8294]}
    else:
        from transformers import Qwen3OmniMoeForConditionalGeneration as Model

        from stages.models.qwen3_omni import processor

        kwargs = {"speaker": "ethan"}
    model = transformers_model(Model, model_dir, args)
    proc = processor(str(model_dir))
    text = proc.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = proc(text=text, return_tensors="pt").to(device)

    def one(text: int, codes: int) -> dict:
        start = time.perf_counter()
        _, wav = model.generate(
            **inputs,
            thinker_max_new_tokens=text,
            thinker_min_new_tokens=text,
            thinker_do_sample=False,
            talker_max_new_tokens=codes,
            talker_min_new_tokens=codes,
            talker_do_sample=args.talker_sampling,  # transformers' talker defaults are the platform's
            return_audio=True,
            **kwargs,
        )
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        e2el = time.perf_counter() - start
        seconds = wav.numel() / 24000
        return {"ttft_s": e2el, "ttfp_s": e2el, "e2el_s": e2el, "audio_s": seconds}

    one(min(n_text, 8), min(n_codes, 16))  # warm-up
    return [one(n_text, n_codes) for _ in range(repeats)]


def transformers_model(model_class, model_dir: Path, args):
    """transformers' whole model: the tiny checkpoint loaded, or (dummy) built from the real-shape configs
    on the device with seeded random weights, bf16 with token2wav in `--code2wav-dtype`."""
    import torch

    if load_format(args) == "auto":
        return model_class.from_pretrained(model_dir, dtype="auto").to(args.device).eval()
    from stages.models.dummy_weights import build_random

    config = model_class.config_class.from_pretrained(model_dir)
    model = build_random(lambda: model_class._from_config(config, dtype=torch.bfloat16), device=args.device, seed=0)
    if hasattr(model, "token2wav"):  # Qwen2.5-Omni; Qwen3-Omni's code2wav stays bf16, as transformers loads it
        model.token2wav.to(getattr(torch, args.code2wav_dtype))
        model.load_speakers(model_dir / "spk_dict.pt")
    return model


def deploy_config(args, n_text: int, n_codes: int) -> dict:
    """The largest concurrency as every stage's max batch, caches sized for requests of this length, the
    chunking of the args."""
    batch = max(args.concurrency)
    ar = {
        "device": args.device,
        "dtype": "bfloat16" if args.device.startswith("cuda") else "float32",
        "max_batch": batch,
        "max_length": 1024 if args.prompt_tokens + n_text + n_codes < 900 else 4096,
        "kv_memory_mb": args.kv_memory_mb or (4096 if args.device.startswith("cuda") else 256),
        "gpu_sms": args.ar_sms,
        **({"prefill_chunk": args.prefill_chunk} if args.prefill_chunk else {}),
    }
    code2wav = {
        "device": args.device,
        "dtype": args.code2wav_dtype,
        "max_batch": batch,
        "max_length": max(2048, n_codes + 64),
        "first_chunk_size": args.first_chunk,
        "async_chunk_size": args.chunk,
        "gpu_sms": args.code2wav_sms,
        "options": {
            "token2wav_dit_autocast": "bfloat16" if args.code2wav_autocast in ("dit", "all") else None,
            "token2wav_vocoder_autocast": "bfloat16" if args.code2wav_autocast == "all" else None,
            "token2wav_compile": args.code2wav_compile,
            "token2wav_vocoder_compile": args.vocoder_compile,
            "token2wav_block_attention": args.block_attention,
            **({"window_max": args.window_max} if args.window_max else {}),
        },
    }
    ar_options = {"prompt_graphs": False} if args.no_prompt_graphs else {}
    stages = {
        name: {**ar, "options": {"compile": name in args.compile, **ar_options}} for name in ("thinker", "talker")
    }
    return {"stages": {**stages, "code2wav": code2wav}}


async def omnistage_run(args, omni, base: dict | None, messages: list[dict]) -> None:
    """One pipeline (engines loaded once, warmed up once), then each concurrency level in turn."""
    n_text = args.text
    talker = talker_sampling(args, omni)
    began = time.perf_counter()
    async with omni:
        print(f"omnistage: stages built in {time.perf_counter() - began:.1f} s", flush=True)

        async def one(index: int) -> dict:
            start = time.perf_counter()
            try:
                result = await omni.generate_all(
                    messages,
                    {"temperature": 0, "max_tokens": n_text, "min_tokens": n_text},
                    request_id=f"bench-{index}-{time.monotonic_ns()}",
                    stage_sampling={"talker": talker},
                )
            except Exception as error:  # counted, not fatal: the bars ask for the failures
                logging.getLogger("benchmark").warning("request %s failed: %s", index, error)
                return {"failed": True, "e2el_s": time.perf_counter() - start, "audio_s": 0}
            metrics = dict(result.metrics)
            metrics["audio_s"] = 0 if result.audio is None else len(result.audio) / 24000
            metrics["e2el_s"] = metrics.get("e2el_s", time.perf_counter() - start)
            return metrics

        for concurrency in args.concurrency:  # warm-up at every size (graph captures, first-seen shapes)
            for _ in range(args.warmups):
                await asyncio.gather(*(one(-1 - i) for i in range(concurrency)))
        for concurrency in args.concurrency:
            rounds = max(1, args.repeats if concurrency == 1 else 1)
            if concurrency == args.trace_at:  # an extra round, not counted: stopping the profiler stalls
                await traced_round(args, concurrency, asyncio.gather(*(one(-100 - i) for i in range(concurrency))))
            if concurrency == args.py_spy_at:
                sample_own_threads(args.py_spy, args.py_spy_seconds)
            results, start = [], time.perf_counter()
            for _ in range(rounds):
                results += await asyncio.gather(*(one(i) for i in range(concurrency)))
            ours = summary(f"omnistage concurrency {concurrency}", results, time.perf_counter() - start)
            if args.step_log:
                step_log.report(start)
            if base:
                print(f"{'':28s} throughput vs transformers: {ours['rps'] / base['rps']:.2f}x", flush=True)


def talker_sampling(args, omni):
    """The talker's sampling for every request, at `--codes` codes (min = max tokens): greedy, or with
    `--talker-sampling` what the platform gives an API request that sets none for the talker, merged
    from the same layers (the pipeline's talker defaults under the deployment's override, as
    control_plane/openai_compat/sampling.py does); the repetition penalty, unset, is the talker
    engine's own either way."""
    from stages.sampling_merge import merge_sampling

    length = {"max_tokens": args.codes, "min_tokens": args.codes}
    if not args.talker_sampling:
        return merge_sampling(request={"temperature": 0, **length})
    stage = omni.pipeline.stage_named("talker")
    return merge_sampling(stage.default_sampling, omni.deploy.sampling_override(stage), length)


def talker_description(args, omni) -> str:
    """How the talker decodes, for the config line: greedy, or sampling with its parameters."""
    import importlib

    sampling = talker_sampling(args, omni)
    engine = importlib.import_module(TALKER_ENGINES[args.family]).TalkerEngine
    penalty = sampling.repetition_penalty or engine.repetition_penalty
    if not args.talker_sampling:
        return f"talker greedy (repetition_penalty {penalty:g})"
    return (
        f"talker sampling as the platform's defaults (temperature {sampling.temperature:g}, top_k {sampling.top_k},"
        f" top_p {sampling.top_p:g}, repetition_penalty {penalty:g}, no seed)"
    )


TALKER_ENGINES = {"qwen2_5_omni": "stages.models.qwen2_5_talker", "qwen3_omni": "stages.models.qwen3_talker"}
"""--family -> the module of its talker engine (whose `repetition_penalty` applies when a request sets none)."""


async def traced_round(args, concurrency: int, requests) -> None:
    """One round of requests with a torch profiler over the whole process (every stage's thread and
    CUDA stream) for its first `--trace-seconds`, then the profile's report. `requests`: the round's
    gathered requests, which start once this has started the profiler."""
    from torch.profiler import ProfilerActivity, profile

    cuda = args.device.startswith("cuda")
    profiler = profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []))
    stopped = []
    profiler.start()
    timer = asyncio.get_running_loop().call_later(args.trace_seconds, lambda: stopped.append(profiler.stop()))
    await requests
    timer.cancel()
    if not stopped:
        profiler.stop()
    report_trace(profiler, concurrency, args.trace_seconds)


def report_trace(profiler, concurrency: int, seconds: float) -> None:
    """Print how busy each CUDA stream was in each TRACE_BIN_S of the trace, with its costliest kernels
    (which say whose it is: every stage's replica thread steps on a stream of its own), and write the
    chrome trace."""
    import os
    from collections import Counter

    from token2wav_windows import write_trace
    from torch.autograd import DeviceType
    from trace_threads import thread_report

    events = profiler.profiler.kineto_results.events()
    kernels = [event for event in events if event.device_type() == DeviceType.CUDA]
    origin = min((event.start_ns() for event in events), default=0)
    bins = max(1, math.ceil(seconds / TRACE_BIN_S))
    busy: dict[int, list[float]] = {}
    names: dict[int, Counter] = {}
    for kernel in kernels:
        stream = kernel.device_resource_id()
        index = min(bins - 1, int((kernel.start_ns() - origin) / 1e9 / TRACE_BIN_S))
        busy.setdefault(stream, [0.0] * bins)[index] += kernel.duration_ns() / 1e9
        names.setdefault(stream, Counter())[kernel.name()[:32]] += kernel.duration_ns()
    print(
        f"trace at {concurrency}: device busy per {TRACE_BIN_S * 1e3:.0f} ms on each CUDA stream, first {seconds:g} s"
    )
    for stream, per_bin in sorted(busy.items()):
        top = ", ".join(name for name, _ in names[stream].most_common(3))
        print(
            f"  stream {stream:3d}, {sum(per_bin) * 1e3:6.0f} ms: "
            + " ".join(f"{b / TRACE_BIN_S:4.0%}" for b in per_bin)
        )
        print(f"             costliest kernels: {top}", flush=True)
    if not busy:
        print("  no CUDA kernels recorded (a CPU run)", flush=True)
    trace = write_trace(profiler, Path(os.environ.get("OUT", ".")) / f"omni_trace_c{concurrency}.json")
    print(f"  chrome trace: {trace} ({trace.stat().st_size / 1e6:.1f} MB)", flush=True)
    if busy:
        print("  host threads (benchmarks/trace_threads.py):\n" + "\n".join(thread_report(trace)), flush=True)


def sample_own_threads(py_spy: str, seconds: float) -> None:
    """Record, in the background, which of this process's threads hold the GIL and where (py-spy, raw
    collapsed stacks per thread to `omni_gil_<pid>.txt` in $OUT or the working directory): the samples
    per thread over the recording's length say how busy the interpreter is and which stage keeps it."""
    import os
    import subprocess

    out = Path(os.environ.get("OUT", ".")) / f"omni_gil_{os.getpid()}.txt"
    command = [py_spy, "record", "--pid", str(os.getpid()), "--gil", "--threads", "--nonblocking", "--rate", "200"]
    command += ["--format", "raw", "--duration", str(int(seconds)), "--output", str(out)]
    subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"py-spy: {seconds:.0f} s of GIL samples at 200 Hz -> {out}", flush=True)


TRACE_BIN_S = 0.25
MESSAGES = [{"role": "user", "content": "Tell me a short story about the sea."}]
FILLER = "The old lighthouse keeper watched the grey waves roll in from the north while gulls circled above."


def audio_messages(seconds: float) -> list[dict]:
    """A user message holding one clip: a seeded mix of speech-band tones and noise, 16 kHz."""
    import numpy as np

    rate = 16000
    time_s = np.arange(int(seconds * rate)) / rate
    rng = np.random.default_rng(0)
    clip = 0.3 * np.sin(2 * np.pi * 220 * time_s) * np.sin(2 * np.pi * 3 * time_s) + 0.02 * rng.standard_normal(
        len(time_s)
    )
    return [
        {
            "role": "user",
            "content": [{"type": "audio", "audio": clip.astype(np.float32).tolist(), "sampling_rate": rate}],
        }
    ]


def prompt_messages(model_dir: Path, family: str, tokens: int) -> list[dict]:
    """MESSAGES, or a user message of filler words padded so the templated prompt has about `tokens` tokens."""
    if not tokens:
        return MESSAGES
    if family == "qwen2_5_omni":
        from stages.models.qwen2_5_omni import processor
    else:
        from stages.models.qwen3_omni import processor
    tokenizer = processor(str(model_dir)).tokenizer
    words = ((FILLER + " ") * (tokens // 4 + 8)).split()

    def length(count: int) -> int:
        messages = [{"role": "user", "content": " ".join(words[:count])}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        return len(ids["input_ids"] if hasattr(ids, "keys") else ids)

    low, high = 1, len(words)
    while low < high:  # the most words whose prompt fits in `tokens`
        middle = (low + high + 1) // 2
        low, high = (middle, high) if length(middle) <= tokens else (low, middle - 1)
    print(f"prompt: {length(low)} tokens ({low} words)", flush=True)
    return [{"role": "user", "content": " ".join(words[:low])}]


def summary(name: str, results: list[dict], wall: float) -> dict:
    failed = sum(1 for r in results if r.get("failed"))
    results = [r for r in results if not r.get("failed")] or [{"e2el_s": float("nan"), "audio_s": 0}]
    rps = len(results) / wall
    mean = lambda key: statistics.mean(r.get(key, float("nan")) for r in results)  # noqa: E731
    rtfs = [r["e2el_s"] / r["audio_s"] for r in results if r["audio_s"]]
    rtf = statistics.mean(rtfs) if rtfs else float("nan")
    print(
        f"{name:28s} req/s {rps:7.3f}  TTFT {mean('ttft_s'):7.3f}s  TTFP {mean('ttfp_s'):7.3f}s  "
        f"E2EL {mean('e2el_s'):7.3f}s  RTF {rtf:6.3f}  audio {mean('audio_s'):5.2f}s  failed {failed}",
        flush=True,
    )
    if len(results) <= 4:
        print(f"{'':28s} E2EL per request: " + " ".join(f"{r['e2el_s']:.3f}s" for r in results), flush=True)
    stages = sorted({key for r in results for key in r if key.startswith("stage.")})
    if stages:
        print(f"{'':28s} " + "  ".join(f"{key[6:]} {mean(key):.3f}s" for key in stages), flush=True)
        ends = {
            name: mean(f"stage.{name}.started_s") + mean(f"stage.{name}.duration_s")
            for name in ("talker", "code2wav")
            if f"stage.{name}.duration_s" in stages
        }
        if len(ends) == 2:  # how long requests wait on code2wav once the talker is done
            print(
                f"{'':28s} last output into a request: talker {ends['talker']:.3f}s, code2wav {ends['code2wav']:.3f}s"
                f" ({ends['code2wav'] - ends['talker']:+.3f}s)",
                flush=True,
            )
    return {"rps": rps}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="tiny", choices=["tiny", "7b-shaped", "30b-shaped"])
    parser.add_argument("--family", default="qwen2_5_omni", choices=["qwen2_5_omni", "qwen3_omni"])
    parser.add_argument("--text", type=int, default=32)
    parser.add_argument("--codes", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--warmups",
        type=int,
        default=1,
        help="warm-up rounds at each concurrency before timing (a window shape first seen mid-request is captured then)",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--code2wav-dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument(
        "--code2wav-autocast",
        choices=["none", "dit", "all"],
        default="none",
        help="bfloat16 autocast over token2wav's float32 DiT (dit) or DiT and BigVGAN (all)",
    )
    parser.add_argument("--first-chunk", type=int, default=5, help="codec frames of the first audio chunk")
    parser.add_argument("--chunk", type=int, default=25, help="codec frames of every later audio chunk")
    parser.add_argument("--window-max", type=int, help="code2wav's options.window_max (default: the family's)")
    parser.add_argument(
        "--compile",
        nargs="*",
        choices=["thinker", "talker"],
        help="options.compile for these AR stages: their decode graphs run one torch.compiled decoder layer (no names: both)",
    )
    parser.add_argument(
        "--no-prompt-graphs",
        action="store_true",
        help="options.prompt_graphs false for the thinker and the talker: prompts run eagerly",
    )
    parser.add_argument(
        "--code2wav-compile",
        action="store_true",
        help="options.token2wav_compile: token2wav's DiT blocks compiled",
    )
    parser.add_argument(
        "--vocoder-compile",
        action="store_true",
        help="options.token2wav_vocoder_compile: BigVGAN activations fused, compiled",
    )
    parser.add_argument(
        "--block-attention",
        action="store_true",
        help="options.token2wav_block_attention: the DiT's attention block by block, no masks",
    )
    parser.add_argument(
        "--code2wav-sms",
        type=int,
        help="code2wav's gpu_sms: its kernels confined to this many SMs, the rest always free for the AR stages",
    )
    parser.add_argument(
        "--ar-sms",
        type=int,
        help="the thinker's and talker's gpu_sms (one partition for both): the rest always free for code2wav",
    )
    parser.add_argument("--log-windows", action="store_true", help="log each code2wav window decode and its timing")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--prompt-tokens", type=int, default=0, help="pad the user message to this many tokens")
    parser.add_argument(
        "--kv-memory-mb", type=int, help="each AR stage's paged cache (default: 4096 on CUDA, 256 on a CPU)"
    )
    parser.add_argument(
        "--audio-seconds", type=float, help="the user message is a clip of this many seconds of audio (with --skip-hf)"
    )
    parser.add_argument("--skip-hf", action="store_true", help="no transformers baseline (no ratios)")
    parser.add_argument(
        "--talker-sampling",
        action="store_true",
        help="the talker samples with the platform's defaults for an API request (default: greedy)",
    )
    parser.add_argument(
        "--trace-at",
        type=int,
        help="before this concurrency's timed run, one extra round under the torch profiler: each CUDA"
        " stream's busy time per 250 ms and a chrome trace (omni_trace_c<N>.json[.gz] in $OUT or here)",
    )
    parser.add_argument("--trace-seconds", type=float, default=3.0, help="how long --trace-at records")
    parser.add_argument("--py-spy", default="py-spy", help="the py-spy binary for --py-spy-at")
    parser.add_argument("--py-spy-at", type=int, help="sample the GIL's holders during this concurrency's timed run")
    parser.add_argument("--py-spy-seconds", type=float, default=8.0)
    parser.add_argument(
        "--prefill-chunk", type=int, help="the thinker's and talker's prompt tokens per step (default: the stage's)"
    )
    parser.add_argument(
        "--step-log",
        action="store_true",
        help="time every thinker and talker step by how it ran (graph replay or eager) and list each of a round's"
        " first 2 s (benchmarks/step_log.py)",
    )
    parser.add_argument(
        "--no-split-steps",
        action="store_true",
        help="a step that admits a prompt runs all its rows eagerly (ModelRunner.split_mixed_steps off)",
    )
    parser.add_argument(
        "--no-cudnn-attention",
        action="store_true",
        help="take cuDNN out of SDPA's kernels for the whole process (torch.backends.cuda.enable_cudnn_sdp(False))",
    )
    parser.add_argument(
        "--switch-interval",
        type=float,
        help="the interpreter's GIL switch interval in seconds (sys.setswitchinterval; Python's default 0.005)",
    )
    parser.add_argument(
        "--model-dir",
        help="keep the checkpoint (tiny, or the real-shape configs) under this folder for later runs (default: a temp dir)",
    )
    args = parser.parse_args()
    if args.audio_seconds and not args.skip_hf:
        parser.error("--audio-seconds needs --skip-hf (the transformers baseline takes text prompts only)")
    args.compile = [] if args.compile is None else args.compile or ["thinker", "talker"]
    logging.basicConfig(level=logging.WARNING, format="%(relativeCreated)8.0f ms %(name)s: %(message)s")
    logging.getLogger("stages.generation").setLevel(logging.DEBUG if args.log_windows else logging.INFO)
    logging.getLogger("stages.sm_partition").setLevel(logging.INFO)
    if args.compile:
        logging.getLogger("stages.ar").setLevel(logging.INFO)  # compile progress per graph batch size
    import torch

    from stages.omni import AsyncOmni

    torch.set_num_threads(args.threads)
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    if args.step_log:
        step_log.record()
    if args.no_cudnn_attention:
        torch.backends.cuda.enable_cudnn_sdp(False)
    if args.no_split_steps:
        from stages.ar.model_runner import ModelRunner

        ModelRunner.split_mixed_steps = False
    deploy = deploy_config(args, args.text, args.codes)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.model_dir) if args.model_dir else Path(tmp)
        model_dir = model_dir_for(args, root)
        messages = (
            audio_messages(args.audio_seconds)
            if args.audio_seconds
            else prompt_messages(model_dir, args.family, args.prompt_tokens)
        )
        omni = AsyncOmni(model_dir, deploy=deploy, load_format=load_format(args))  # its engines start in the run
        print(
            f"config: {args.family} {args.model} on {args.device}, {args.text} text tokens, {args.codes} codes,"
            f" thinker greedy, {talker_description(args, omni)}",
            flush=True,
        )
        base = None
        if not args.skip_hf:
            began = time.perf_counter()
            hf = transformers_run(args, model_dir, messages, args.text, args.codes, args.repeats)
            gc.collect()  # transformers' copy of the weights is gone before Omnistage loads its own
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
                print(f"GPU memory after freeing transformers: {torch.cuda.memory_allocated() / 2**30:.1f} GiB")
            base = summary("transformers (sequential)", hf, sum(r["e2el_s"] for r in hf))
            print(f"{'':28s} (built, warmed and run in {time.perf_counter() - began:.0f} s)", flush=True)
        asyncio.run(omnistage_run(args, omni, base, messages))


if __name__ == "__main__":
    main()
