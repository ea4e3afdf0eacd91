"""One prompt step of an omni thinker, eager against its prompt graph (`options.prompt_graphs`), in one process.

    python3 benchmarks/prompt_step.py --device cuda --model 30b-shaped --prompt-tokens 100 --repeats 10
    .venv/bin/python benchmarks/prompt_step.py --device cpu --model tiny --family qwen3_omni   # the code path only

Builds the thinker alone (Qwen3-Omni-30B-A3B-shaped or Qwen2.5-Omni-7B-shaped with random weights, or the
tiny checkpoint) with its prompt graphs captured ("uncaptured" on a CPU), then alternates a prompt of
`--prompt-tokens` random tokens arriving alone through its bucket's graph and the same with the graphs
set aside (eager, as without the option): the time from the step's start to its first token on the
host, the device synchronized, medians and the ratio (`options.prompt_graphs`, on by default on
CUDA). The decode layers stay uncompiled (`compile` changes only the decode graphs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from omni_pipeline import REAL_SHAPED, load_format, model_dir_for  # noqa: E402 - beside this script


def build(args, root: Path):
    from stages.config import StageDeployConfig

    if args.model in REAL_SHAPED:
        args.family = REAL_SHAPED[args.model][1]
    graphs = True if args.device.startswith("cuda") else "uncaptured"
    deploy = StageDeployConfig(
        device=args.device,
        dtype="bfloat16" if args.device.startswith("cuda") else "float32",
        load_format=load_format(args),
        max_batch=max(8, args.prompts),
        options={"prompt_graphs": graphs, "compile": False, "talker_inputs": False},
    )
    if args.family == "qwen3_omni":
        from stages.models.qwen3_omni import build_thinker
    else:
        from stages.models.qwen2_5_omni import build_thinker
    return build_thinker(model_dir_for(args, root), deploy)


def one_step(engine, prompts: list[list[int]], index: int) -> tuple[float, list[int]]:
    """Seconds until the prompts' first tokens, and those tokens (in the prompts' order)."""
    import torch

    from stages.protocol import SamplingParams, StageRequest

    sampling = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    for number, tokens in enumerate(prompts):
        request = StageRequest(request_id=f"p{index}-{number:03d}", prompt_token_ids=tokens, sampling=sampling)
        engine.add_request(request)
    if engine.device.type == "cuda":
        torch.cuda.synchronize()
    began = time.perf_counter()
    first: dict[str, int] = {}
    while engine.has_unfinished():
        for output in engine.step():
            if output.token_ids:
                first.setdefault(output.request_id, output.token_ids[0])
    if engine.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - began, [first[request_id] for request_id in sorted(first)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="tiny", choices=["tiny", *REAL_SHAPED])
    parser.add_argument("--family", default="qwen3_omni", choices=["qwen2_5_omni", "qwen3_omni"])
    parser.add_argument("--prompt-tokens", type=int, default=100)
    parser.add_argument("--prompts", type=int, default=1, help="prompts arriving together, computed in one step")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    import random

    with tempfile.TemporaryDirectory() as scratch:
        began = time.perf_counter()
        engine = build(args, Path(scratch))
        print(f"thinker built in {time.perf_counter() - began:.1f} s; buckets captured: "
              f"{sorted(engine.runner.prompt_graphs.steps.graphs) or 'none (uncaptured)'}", flush=True)  # fmt: skip
        rng = random.Random(0)
        vocab = min(engine.vocab_size, 150_000)
        graphs = engine.runner.prompt_graphs
        times: dict[str, list[float]] = {"graph": [], "eager": []}
        agree = total = 0
        for index in range(args.repeats + 1):  # the first of each is a warm-up
            prompts = [[rng.randrange(1000, vocab) for _ in range(args.prompt_tokens)] for _ in range(args.prompts)]
            firsts = {}
            for mode in ("graph", "eager"):
                engine.runner.prompt_graphs = graphs if mode == "graph" else None
                seconds, firsts[mode] = one_step(engine, prompts, 2 * index + (mode == "eager"))
                assert engine.runner.last_path == ("prompt" if mode == "graph" else "eager"), engine.runner.last_path
                if index:
                    times[mode].append(seconds)
            agree += sum(a == b for a, b in zip(firsts["graph"], firsts["eager"], strict=True))
            total += args.prompts
        engine.runner.prompt_graphs = graphs
    graph, eager = statistics.median(times["graph"]), statistics.median(times["eager"])
    print(f"{args.model} thinker, {args.prompts} prompt(s) of {args.prompt_tokens} tokens in one step, median of "
          f"{args.repeats}: eager {eager * 1e3:.1f} ms, prompt graph {graph * 1e3:.1f} ms ({eager / graph:.2f}x); "
          f"first tokens equal in {agree} of {total}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
