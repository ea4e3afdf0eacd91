"""AR torch engine throughput against transformers' `generate`, measured in the same run.

    python benchmarks/ar_engine.py --device cpu    # tiny Qwen2 checkpoint, 16 mixed requests
    python benchmarks/ar_engine.py --device cuda   # Qwen2.5-0.5B's real shapes, random bf16 weights

CPU: 16 concurrent requests with mixed prompt (8-128) and output (16-96) lengths. The engine serves
them with continuous batching; the baselines are `generate` one request at a time and one left-padded
static batch (which decodes up to the longest output for everyone). Bar: >= 5x one-at-a-time.

CUDA: 128-token prompts, 256 new tokens. Decode tok/s at batch 1 and batch 128 against `generate`
(eager dynamic cache, and the static cache). Bars: batch 1 >= 10x HF eager; batch 128 >= 3x HF
static batch, i.e. `generate` over one padded batch of 128 (static batching, as in the CPU run),
which is how shared/reference/gpu-baselines/hf_baseline.py measured the issue's reference 4,187
tok/s. `--static-cache-batch` adds the stronger baseline of that batch with the static cache
(torch.compile'd by transformers; its compilation at batch 128 can take several minutes).
The CUDA model is the real-shape directory `qwen2_5_0_5b` (`python -m stages.tiny --real-shapes`:
Qwen2.5-0.5B's published config, no weights) built by the engine's loader with `load_format: dummy`
(random bf16 weights on the device); transformers' side gets the same weights.
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from stages.config import StageDeployConfig  # noqa: E402
from stages.protocol import SamplingParams, StageRequest  # noqa: E402


def run_engine(engine, requests: list[StageRequest]) -> tuple[dict[str, list[int]], list[tuple[float, set[str]]]]:
    """Run to completion; return each request's tokens and, per step, its end time and who got a token."""
    tokens: dict[str, list[int]] = {r.request_id: [] for r in requests}
    steps = []
    for request in requests:
        engine.add_request(request)
    while engine.has_unfinished():
        outputs = engine.step()
        produced = set()
        for output in outputs:
            assert output.error is None, output.error
            if output.token_ids:
                produced.add(output.request_id)
            tokens[output.request_id] += output.token_ids
        steps.append((time.perf_counter(), produced))
    return tokens, steps


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


# -- CPU --------------------------------------------------------------------------------------


def bench_cpu(args) -> None:
    from transformers import AutoModelForCausalLM

    from stages.ar import ARTorchEngine
    from stages.tiny import build_all

    torch.set_num_threads(args.threads)
    root = Path(args.models or tempfile.mkdtemp(prefix="ar_bench_"))
    model_dir = build_all(root, only=[args.arch])[args.arch]
    rng = random.Random(0)
    shapes = [(rng.randint(8, 128), rng.randint(16, 96)) for _ in range(args.requests)]
    prompts = [[rng.randrange(400) for _ in range(n)] for n, _ in shapes]
    outputs = [m for _, m in shapes]
    useful = sum(outputs)
    print(
        f"model {args.arch} at {model_dir}; {args.requests} requests, prompts {min(n for n, _ in shapes)}-"
        f"{max(n for n, _ in shapes)} tokens, outputs {min(outputs)}-{max(outputs)} tokens ({useful} in all); "
        f"{args.threads} thread(s)"
    )

    hf = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    engine = ARTorchEngine.from_pretrained(model_dir, StageDeployConfig(max_batch=args.requests, prefill_chunk=512))

    def engine_requests(tag: str) -> list[StageRequest]:
        return [
            StageRequest(
                request_id=f"{tag}{i}",
                prompt_token_ids=p,
                sampling=SamplingParams(temperature=0.0, max_tokens=m, min_tokens=m),
            )
            for i, (p, m) in enumerate(zip(prompts, outputs, strict=True))
        ]

    run_engine(engine, engine_requests("warm"))
    start = time.perf_counter()
    engine_tokens, _ = run_engine(engine, engine_requests("r"))
    engine_s = time.perf_counter() - start

    with torch.no_grad():
        hf.generate(torch.tensor([prompts[0]]), max_new_tokens=4, min_new_tokens=4, do_sample=False)
        start = time.perf_counter()
        single = []
        for p, m in zip(prompts, outputs, strict=True):
            out = hf.generate(torch.tensor([p]), max_new_tokens=m, min_new_tokens=m, do_sample=False)
            single.append(out[0, len(p) :].tolist())
        single_s = time.perf_counter() - start

        width = max(len(p) for p in prompts)
        pad = hf.generation_config.pad_token_id
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        start = time.perf_counter()
        longest = max(outputs)
        hf.generate(ids, attention_mask=mask, max_new_tokens=longest, min_new_tokens=longest, do_sample=False)
        static_s = time.perf_counter() - start

    agree = sum(engine_tokens[f"r{i}"] == single[i] for i in range(len(prompts)))
    print(f"greedy agreement with HF one-at-a-time: {agree}/{len(prompts)} requests")
    rows = [
        ("torch engine (continuous batching)", engine_s),
        ("HF generate, one request at a time", single_s),
        ("HF generate, one padded static batch", static_s),
    ]
    for label, seconds in rows:
        print(f"  {label:40s} {seconds:7.3f} s  {useful / seconds:9.1f} useful tok/s")
    print(f"ratio vs one-at-a-time: {single_s / engine_s:.1f}x (bar >= 5x)")
    print(f"ratio vs padded static batch: {static_s / engine_s:.1f}x")


# -- CUDA -------------------------------------------------------------------------------------


def bench_cuda(args) -> None:
    from transformers import AutoModelForCausalLM

    from stages.ar.model_adapter import CausalLMAdapter
    from stages.ar.torch_engine import ARTorchEngine, load_causal_lm
    from stages.tiny import REAL_SHAPES, build_all

    device = args.device
    variants = {"ours": False} if args.no_compile else {"ours": False, "ours_compiled": True}
    for compile_step in variants.values():
        tiny_oracle_check(device, compile_step)
    root = Path(args.models or tempfile.mkdtemp(prefix="ar_bench_"))
    model_dir = build_all(root, only=["qwen2_5_0_5b"], builders=REAL_SHAPES)["qwen2_5_0_5b"]
    ours = load_causal_lm(model_dir, StageDeployConfig(dtype="bfloat16", load_format="dummy"), device)
    with torch.device(device):
        hf = AutoModelForCausalLM.from_config(
            copy.deepcopy(ours.config), dtype=torch.bfloat16, attn_implementation="sdpa"
        ).eval()
    hf.load_state_dict(ours.state_dict())
    prompt_len, new_tokens, big = args.prompt_len, args.new_tokens, args.batch
    rng = random.Random(0)
    prompts = [[rng.randrange(1000, 100_000) for _ in range(prompt_len)] for _ in range(big)]
    print(
        f"Qwen2.5-0.5B ({model_dir}, load_format dummy: random bf16 weights) on {torch.cuda.get_device_name(device)}; "
        f"prompts {prompt_len} tokens, {new_tokens} new tokens",
        flush=True,
    )
    with torch.no_grad():
        reference = hf.generate(torch.tensor(prompts[:1], device=device), max_new_tokens=16, do_sample=False)

    results = {}
    for name, compile_step in variants.items():
        deploy = StageDeployConfig(
            device=device,
            max_batch=big,
            max_length=prompt_len + new_tokens + 16,
            dtype="bfloat16",
            kv_memory_mb=args.kv_memory_mb,
            prefill_chunk=args.prefill_chunk,
            options={"cuda_graphs": not args.no_graphs, "compile": compile_step},
        )
        start = time.perf_counter()
        engine = ARTorchEngine(CausalLMAdapter(ours), None, deploy, device=device, eos_token_ids=set())
        graphs = engine.runner.graphs
        print(
            f"{name}: engine ready in {time.perf_counter() - start:.1f} s (KV cache "
            f"{engine.kv_cache.nbytes / 2**30:.2f} GiB, CUDA graphs {graphs.sizes if graphs else 'off'})",
            flush=True,
        )
        tokens = engine_tokens(engine, prompts[:4], 16)
        agree = sum(a == b for a, b in zip(tokens[0], reference[0, prompt_len:].tolist(), strict=False))
        print(f"{name}: greedy agreement with HF on the first 16 tokens (bf16, batch of 4): {agree}/16", flush=True)
        if graphs:
            for size in (min(graphs.sizes), big):
                print(f"{name}: graph replay alone, batch {size}: {replay_ms(graphs, size):.3f} ms", flush=True)
            if args.profile:
                for size in (min(graphs.sizes), big):
                    print_kernel_profile(graphs, size)
        for batch in (1, big):
            results[(name, batch)] = engine_decode_tps(engine, prompts[:batch], new_tokens, device)
            print(f"  batch {batch:4d} {name:14s} {results[(name, batch)]:10.1f} decode tok/s", flush=True)
        del engine, graphs
        torch.cuda.empty_cache()

    baselines = [] if args.skip_hf else [("hf_eager", 1), ("hf_eager", big), ("hf_static", 1)]
    if args.static_cache_batch and not args.skip_hf:
        baselines.append(("hf_static", big))
    for name, batch in baselines:
        try:
            tps = hf_decode_tps(hf, prompts[:batch], new_tokens, device, static=name == "hf_static")
        except Exception as error:  # a baseline that cannot run is reported, not fatal
            print(f"  batch {batch:4d} {name:14s} failed: {type(error).__name__}: {error}", flush=True)
            continue
        results[(name, batch)] = tps
        print(f"  batch {batch:4d} {name:14s} {tps:10.1f} decode tok/s", flush=True)

    def ratio(batch, baseline) -> str:
        ours_best = max((results[(n, batch)], n) for n in variants if (n, batch) in results)
        if (baseline, batch) not in results:
            return "n/a"
        return f"{ours_best[0] / results[(baseline, batch)]:.1f}x ({ours_best[1]})"

    print(f"bs1 vs HF eager: {ratio(1, 'hf_eager')} (bar >= 10x)")
    print(f"bs1 vs HF static cache: {ratio(1, 'hf_static')}")
    print(f"bs{big} vs HF static batch (one padded batch, eager): {ratio(big, 'hf_eager')} (bar >= 3x)")
    print(f"bs{big} vs HF static batch with the static cache: {ratio(big, 'hf_static')}")


def print_kernel_profile(graphs, size: int) -> None:
    """The GPU kernels of a few replays of the decode graph, by total time."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            graphs.steps.graphs[size].replay()
        torch.cuda.synchronize()
    print(f"decode graph, batch {size}, 3 replays:", flush=True)
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=20), flush=True)


def replay_ms(graphs, size: int, repeats: int = 50) -> float:
    """GPU time of one captured decode step (the lower bound of a step; the rest is host work)."""
    graph = graphs.steps.graphs[size]
    graph.replay()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        graph.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats * 1e3


def tiny_oracle_check(device: str, compile_step: bool) -> None:
    """Greedy tokens of the engine (CUDA graphs on) against HF generate on a tiny fp32 checkpoint."""
    from transformers import AutoModelForCausalLM

    from stages.ar import ARTorchEngine
    from stages.tiny import build_all

    model_dir = build_all(tempfile.mkdtemp(prefix="ar_bench_"), only=["qwen2"])["qwen2"]
    hf = AutoModelForCausalLM.from_pretrained(str(model_dir)).to(device).eval()
    deploy = StageDeployConfig(device=device, max_batch=8, max_length=256, options={"compile": compile_step})
    engine = ARTorchEngine.from_pretrained(model_dir, deploy)
    rng = random.Random(1)
    prompts = [[rng.randrange(400) for _ in range(n)] for n in (1, 5, 12, 23, 31, 40, 57, 70)]
    tokens = engine_tokens(engine, prompts, 32)
    agree = 0
    for prompt, ours in zip(prompts, tokens, strict=True):
        with torch.no_grad():
            out = hf.generate(
                torch.tensor([prompt], device=device), max_new_tokens=32, min_new_tokens=32, do_sample=False
            )
        agree += out[0, len(prompt) :].tolist() == ours
    graphs = engine.runner.graphs.sizes if engine.runner.graphs else "off"
    print(
        f"tiny qwen2 fp32 on {device}, CUDA graphs {graphs}, compiled {compile_step}: "
        f"greedy equal to HF for {agree}/8 requests",
        flush=True,
    )


def greedy_requests(tag: str, prompts, new_tokens) -> list[StageRequest]:
    sampling = SamplingParams(temperature=0.0, max_tokens=new_tokens, min_tokens=new_tokens)
    return [StageRequest(request_id=f"{tag}{i}", prompt_token_ids=p, sampling=sampling) for i, p in enumerate(prompts)]


def engine_tokens(engine, prompts, new_tokens) -> list[list[int]]:
    tokens, _ = run_engine(engine, greedy_requests("check", prompts, new_tokens))
    return [tokens[f"check{i}"] for i in range(len(prompts))]


def engine_decode_tps(engine, prompts, new_tokens, device) -> float:
    """Tokens produced after every request has its first token, over that decode-only time."""
    tps = 0.0
    for attempt in range(2):  # the first run warms up
        sync(device)
        tokens, steps = run_engine(engine, greedy_requests(f"b{attempt}_", prompts, new_tokens))
        all_started = max(next(t for t, ids in steps if rid in ids) for rid in tokens)
        decoded = sum(len(ids) for t, ids in steps if t > all_started)
        tps = decoded / (steps[-1][0] - all_started)
    return tps


def hf_decode_tps(model, prompts, new_tokens, device, static: bool) -> float:
    """(new_tokens - 1) * batch over the time of generate(new_tokens) minus generate(1) (the prefill)."""
    ids = torch.tensor(prompts, device=device)
    kwargs = dict(do_sample=False, pad_token_id=0)
    if static:
        kwargs["cache_implementation"] = "static"

    def timed(count: int) -> float:
        sync(device)
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, max_new_tokens=count, min_new_tokens=count, **kwargs)
        sync(device)
        return time.perf_counter() - start

    timed(new_tokens)  # warm-up (and compilation for the static cache)
    prefill = timed(1)
    total = timed(new_tokens)
    return (new_tokens - 1) * len(prompts) / max(total - prefill, 1e-9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (CPU run)")
    parser.add_argument("--arch", default="qwen2", choices=["qwen2", "qwen3", "llama"], help="tiny model (CPU run)")
    parser.add_argument("--models", help="where the tiny (CPU) or real-shape (CUDA) models go (default: a temp dir)")
    parser.add_argument("--requests", type=int, default=16, help="concurrent requests (CPU run)")
    parser.add_argument("--batch", type=int, default=128, help="large decode batch (CUDA run)")
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--kv-memory-mb", type=int, default=4096)
    parser.add_argument("--prefill-chunk", type=int, default=4096)
    parser.add_argument("--no-graphs", action="store_true", help="disable CUDA graphs (CUDA run)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile'd variant (CUDA run)")
    parser.add_argument("--profile", action="store_true", help="print the decode graph's top kernels (CUDA run)")
    parser.add_argument("--skip-hf", action="store_true", help="no transformers baselines (CUDA run; no ratios)")
    parser.add_argument("--static-cache-batch", action="store_true",
                        help="also time HF's static cache at the large batch (CUDA run; slow to compile)")  # fmt: skip
    args = parser.parse_args()
    if args.device == "cpu":
        bench_cpu(args)
    else:
        bench_cuda(args)


if __name__ == "__main__":
    main()
