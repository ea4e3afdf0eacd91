"""Qwen3-Omni at its real shapes: the MoE blocks, the thinker's logits, the code predictor, code2wav and
the CUDA graphs, each against transformers' own modules. Prints one line per check and PASS/FAIL.

    python3 benchmarks/qwen3_omni_check.py --device cuda     # writes the real-shape configs to a temp dir
    python3 benchmarks/qwen3_omni_check.py --model-dir var/models/qwen3_omni --load-format auto  # tiny, CPU

Checks (random weights: `load_format dummy`, bf16 on CUDA):

1. MoE blocks, the thinker's (2048 -> 128 experts x 768, top 8) and the talker's (1024 -> 128 x 384, top 6,
   shared expert): `GroupedMoE` against transformers' eager experts loop and its default implementation,
   over 1 to 2048 tokens; tolerance in bf16: relative L2 <= 1e-2 (a bf16 rounding is 2^-8 = 3.9e-3 relative;
   the sum over the k experts is rounded once here and k times there). Then one captured forward replayed
   on new input must equal the eager forward exactly; the times of each.
2. The thinker's logits: a 100-token prompt and 32 greedy tokens through the stage engine (decode steps
   replaying CUDA graphs) against transformers' thinker forward (its eager experts loop, SDPA) over the
   same tokens; per position relative L2 <= 3e-2, and the top token equal on >= 90% of positions (random
   weights give near-ties that bf16 rounding may flip).
3. Every captured decode graph (thinker, talker) replayed equals its step run eagerly on the same inputs.
4. The code predictor: greedy residual codes of 8 frames against transformers' `generate` in float32
   (equal) and in bf16 (agreement reported), seeded sampling reproducible.
5. code2wav: a batch of windows through its CUDA graph against the module run eagerly one at a time;
   milliseconds per window at batch 1, 8, 32.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS: list[tuple[str, bool, str]] = []


def report(name: str, passed: bool, detail: str) -> None:
    RESULTS.append((name, passed, detail))
    print(f"{'PASS' if passed else 'FAIL'}  {name:44s} {detail}", flush=True)


def rel_l2(ours, theirs) -> float:
    return float((ours.float() - theirs.float()).norm() / theirs.float().norm().clamp_min(1e-12))


def timed(function, device: str, repeats: int = 10) -> float:
    import torch

    function()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(repeats):
        function()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - began) / repeats * 1e3


def deploy(args, **fields):
    from stages.config import StageDeployConfig

    extra = {"load_format": args.load_format} if args.load_format != "auto" else {}
    return StageDeployConfig(device=args.device, dtype=args.dtype, **extra, **fields)


# -- 1. MoE blocks ----------------------------------------------------------------------------


def check_moe_blocks(args, config) -> None:
    import torch
    from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as modeling

    from stages.ar.moe import GroupedMoE

    dtype = getattr(torch, args.dtype)
    parts = (
        ("thinker", config.thinker_config.text_config, modeling.Qwen3OmniMoeThinkerTextSparseMoeBlock),
        ("talker", config.talker_config.text_config, modeling.Qwen3OmniMoeTalkerTextSparseMoeBlock),
    )
    for name, text_config, block_class in parts:
        text_config = copy.deepcopy(text_config)
        torch.manual_seed(0)
        with torch.device(args.device):
            block = block_class(text_config).to(dtype).eval()
        with torch.no_grad():
            for parameter in block.parameters():
                parameter.normal_(0, 0.02)
        moe = GroupedMoE(block)
        width = text_config.hidden_size
        worst, worst_default = 0.0, 0.0
        for tokens in (1, 8, 32, 256, 2048):
            x = torch.randn(1, tokens, width, device=args.device, dtype=dtype)
            with torch.no_grad():
                ours = moe(x)
                text_config._experts_implementation = "eager"
                eager = block(x)
                text_config._experts_implementation = "grouped_mm"
                default = block(x)
            worst = max(worst, rel_l2(ours, eager))
            worst_default = max(worst_default, rel_l2(ours, default))
        report(
            f"MoE {name}: GroupedMoE vs transformers",
            worst <= 1e-2,
            f"kernel {moe.kernel}; rel-L2 vs eager loop <= {worst:.2e}, vs transformers' grouped_mm {worst_default:.2e}"
            " (1..2048 tokens)",
        )
        if args.device.startswith("cuda"):
            check_moe_graph(args, block, moe, width, dtype, name)


def check_moe_graph(args, block, moe, width, dtype, name) -> None:
    import torch

    static = torch.randn(1, 32, width, device=args.device, dtype=dtype)
    with torch.no_grad():
        moe(static)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = moe(static)
        fresh = torch.randn_like(static)
        static.copy_(fresh)
        graph.replay()
        eager = moe(fresh)
        replay_ms = timed(graph.replay, args.device, 50)
        eager_ms = timed(lambda: moe(fresh), args.device, 20)
        block.experts.config._experts_implementation = "eager"
        loop_ms = timed(lambda: block(fresh), args.device, 5)
    report(
        f"MoE {name}: captured forward == eager (32 tokens)",
        torch.equal(captured, eager),
        f"max diff {float((captured - eager).abs().max()):.2e}; replay {replay_ms:.3f} ms, eager {eager_ms:.3f} ms, "
        f"transformers' eager loop {loop_ms:.3f} ms",
    )


# -- 2/3. the thinker's logits and the decode graphs ------------------------------------------


class RecordingSampler:
    def __init__(self, sampler):
        self.sampler, self.logits = sampler, []

    def __call__(self, logits, seqs):
        self.logits.append(logits[0].float().cpu())
        return self.sampler(logits, seqs)


def check_thinker(args, config) -> None:
    import torch

    from stages.ar.moe import remove_grouped_moe, use_grouped_moe
    from stages.models.qwen3_omni import build_thinker
    from stages.protocol import SamplingParams, StageRequest

    began = time.perf_counter()
    engine = build_thinker(
        args.model_dir,
        deploy(args, max_batch=8, max_length=512, kv_memory_mb=1024, options={"talker_inputs": False}),
    )
    report("thinker: built", True, f"{time.perf_counter() - began:.1f} s (weights, graph captures)")
    graphs = engine.runner.graphs
    if args.device.startswith("cuda"):
        check_captured("thinker", graphs)
    vocab = config.thinker_config.text_config.vocab_size
    prompt = torch.randint(0, min(vocab, 150000), (100,), generator=torch.Generator().manual_seed(0)).tolist()
    recorder = RecordingSampler(engine.sampler)
    engine.sampler = recorder
    replays = count_calls(engine.runner, "_run_graph")
    engine.add_request(
        StageRequest(
            request_id="check",
            prompt_token_ids=prompt,
            sampling=SamplingParams(temperature=0, max_tokens=32, ignore_eos=True),
        )
    )
    tokens = []
    while engine.has_unfinished():
        for output in engine.step():
            assert output.error is None, output.error
            tokens += output.token_ids
    ours = torch.stack(recorder.logits)
    thinker = engine.adapter.model
    remove_grouped_moe(thinker.model)
    text_config = thinker.model.config
    implementation, text_config._attn_implementation = text_config._attn_implementation, "sdpa"
    text_config._experts_implementation = "eager"
    ids = torch.tensor([prompt + tokens[:-1]], device=args.device)
    with torch.no_grad():
        hidden = thinker.model(input_ids=ids, use_cache=False).last_hidden_state[0, len(prompt) - 1 :]
        theirs = thinker.lm_head(hidden).float().cpu()
    text_config._attn_implementation = implementation
    use_grouped_moe(thinker.model)
    errors = [rel_l2(a, b) for a, b in zip(ours, theirs, strict=True)]
    decided, disagreed = top1_where_decided(ours, theirs)
    report(
        "thinker: logits vs transformers (100+32 tokens)",
        max(errors) <= 3e-2 and disagreed == 0,
        f"rel-L2 max {max(errors):.2e} mean {sum(errors) / len(errors):.2e}; top-1 equal at {decided - disagreed} "
        f"of the {decided} positions whose top-1 leads by more than twice the largest logit difference "
        f"(random weights leave the others within bf16 noise); {replays[0]} of 32 steps replayed a graph",
    )
    del engine, thinker
    free(args.device)


def top1_where_decided(ours, theirs) -> tuple[int, int]:
    """Positions where transformers' top-1 leads its runner-up by more than twice the largest
    difference between the two logit rows (so rounding cannot swap them), and how many of those
    our top-1 disagrees with."""
    decided = disagreed = 0
    for a, b in zip(ours, theirs, strict=True):
        top2 = b.topk(2).values
        if top2[0] - top2[1] > 2 * float((a - b).abs().max()):
            decided += 1
            disagreed += int(a.argmax() != b.argmax())
    return decided, disagreed


def count_calls(owner, name: str) -> list[int]:
    """Wrap `owner.name` to count its calls; the count is the list's one item."""
    count, original = [0], getattr(owner, name)

    def wrapped(*args, **kwargs):
        count[0] += 1
        return original(*args, **kwargs)

    setattr(owner, name, wrapped)
    return count


def check_captured(name: str, graphs) -> None:
    captured = sorted(graphs.steps.graphs) if graphs is not None else []
    sizes = graphs.sizes if graphs is not None else "no decode graphs (the adapter says they cannot run)"
    report(f"{name}: decode steps captured at every batch size", captured == sizes, f"captured {captured} of {sizes}")
    if captured:
        check_replays(name, graphs)


def check_replays(name: str, graphs) -> None:
    """Each captured size replayed on the static inputs as they stand equals the same step run eagerly."""
    import torch

    worst = 0.0
    with torch.inference_mode():
        for size, graph in graphs.steps.graphs.items():
            graph.replay()
            replayed = graphs.steps.outputs[size].logits.float().clone()
            eager = graphs._forward(size).logits.float()
            worst = max(worst, float((replayed - eager).abs().max() / eager.abs().max().clamp_min(1e-12)))
    report(
        f"{name}: graph replay == eager step",
        worst <= 1e-2,
        f"max |logit diff| / max |logit| {worst:.1e} over batch sizes {sorted(graphs.steps.graphs)}",
    )


# -- 4. the talker's code predictor ------------------------------------------------------------


def check_talker(args, config) -> None:
    import torch

    from stages.models.qwen3_omni import build_talker

    began = time.perf_counter()
    options = {"compile": args.compile}
    engine = build_talker(args.model_dir, deploy(args, max_batch=8, max_length=1024, kv_memory_mb=512, options=options))
    report("talker: built", True, f"{time.perf_counter() - began:.1f} s (weights, graph captures)")
    ar = engine.engine
    predictor = ar.adapter.predictor
    if args.device.startswith("cuda"):
        check_captured("talker", ar.runner.graphs)
        captured = sorted({size for size, _ in predictor.steps.graphs})
        report(
            "code predictor: loop captured at every batch size, greedy and sampled",
            captured == predictor.sizes and len(predictor.steps.graphs) == 2 * len(captured),
            f"captured {captured} of {predictor.sizes}",
        )
        for size in (1, 8):
            graph = ar.runner.graphs.steps.graphs.get(size)
            if graph is not None:
                ms = timed(graph.replay, args.device, 20)
                report(f"talker: one decode step at batch {size}", True, f"{ms:.2f} ms (graph replay)")
    talker = ar.adapter.model
    rows = 8
    generator = torch.Generator(device=args.device).manual_seed(0)
    width = predictor.width
    hidden = torch.randn(rows, width, generator=generator, device=args.device).to(predictor.hidden.dtype)
    codes0 = torch.randint(0, 2048, (rows,), generator=generator, device=args.device)
    with torch.no_grad():
        code0 = talker.get_input_embeddings()(codes0)
    for dtype in ("float32", args.dtype):
        compare_predictor(args, predictor, hidden, code0, getattr(torch, dtype))
    seeds, frames = list(range(rows)), [5] * rows
    first = predictor.run(hidden, code0, seeds, frames, [False] * rows)[0].tolist()
    again = predictor.run(hidden, code0, seeds, frames, [False] * rows)[0].tolist()
    report("code predictor: seeded sampling reproducible", first == again, f"{rows} rows, seeds 0..{rows - 1}")
    for batch in (1, rows):
        for greedy in (True, False):
            ms = timed(
                lambda batch=batch, greedy=greedy: predictor.run(
                    hidden[:batch], code0[:batch], seeds[:batch], frames[:batch], [greedy] * batch
                )[0].tolist(),
                args.device,
                20,
            )
            what = "greedy" if greedy else "sampled"
            report(
                f"code predictor: 15 codes x {batch} rows, {what}",
                True,
                f"{ms:.2f} ms per frame (host copies included)",
            )
    del engine, ar, talker
    free(args.device)


def compare_predictor(args, predictor, hidden, code0, dtype) -> None:
    import torch

    from stages.models.qwen3_code_predictor import CodePredictor

    reference = copy.deepcopy(predictor.module).to(dtype)
    reference.model.config._attn_implementation = "sdpa"
    ours = predictor
    if dtype != predictor.hidden.dtype:
        ours = CodePredictor(copy.deepcopy(predictor.module).to(dtype), max_batch=8, device=args.device)
    rows = hidden.shape[0]
    with torch.no_grad():
        result = reference.generate(
            inputs_embeds=torch.stack([hidden, code0], dim=1).to(dtype),
            max_new_tokens=reference.config.num_code_groups - 1,
            do_sample=False,
            output_hidden_states=True,
            return_dict_in_generate=True,
        )
    codes = ours.run(hidden.to(dtype), code0.to(dtype), [0] * rows, [0] * rows, [True] * rows)[0].tolist()
    expected = result.sequences.tolist()
    equal = sum(int(a == b) for ra, rb in zip(codes, expected, strict=True) for a, b in zip(ra, rb, strict=True))
    total = rows * len(expected[0])
    first_rows = sum(int(ra[0] == rb[0]) for ra, rb in zip(codes, expected, strict=True))
    name = f"code predictor: greedy vs transformers ({dtype})".replace("torch.", "")
    passed = equal == total if dtype == torch.float32 else first_rows == rows
    report(name, passed, f"{equal}/{total} codes equal (first code {first_rows}/{rows}: later ones follow earlier)")
    del reference
    free(args.device)


# -- 5. code2wav -------------------------------------------------------------------------------


def check_code2wav(args) -> None:
    for dtype in ("float32", "bfloat16") if args.device.startswith("cuda") else ("float32",):
        with exact_float32(args.device, dtype):  # from the build on: graphs keep the kernels they captured
            check_code2wav_in(args, dtype)
        free(args.device)


def check_code2wav_in(args, dtype: str) -> None:
    import numpy as np

    from stages.generation.engine import CodeStream, Window
    from stages.models.qwen3_omni import build_code2wav

    engine = build_code2wav(args.model_dir, _with_dtype(deploy(args, max_batch=32, max_length=4096), dtype))
    decoder = engine.decoder
    rng = np.random.default_rng(0)
    streams = [CodeStream(f"r{i}", None, list(rng.integers(0, 2048, size=(80, 16)))) for i in range(32)]
    windows = [Window(stream, 30 + i % 3, 55 + i % 3, final=False) for i, stream in enumerate(streams)]
    batched = decoder.decode(windows[:8])
    graphs, decoder.graphs = decoder.graphs, None
    alone = [decoder.decode([window])[0] for window in windows[:8]]
    decoder.graphs = graphs
    if dtype == "float32":  # TF32 off: batching and padding must not change a sample beyond float32 rounding
        worst = max(float(np.abs(a - b).max() / (np.abs(b).max() + 1e-9)) for a, b in zip(batched, alone, strict=True))
        bound, measure = 1e-4, "max diff / max |audio|"
    else:  # bf16 kernels accumulate in a batch-size-dependent order: compare whole windows
        worst = max(
            float(np.linalg.norm(a - b) / (np.linalg.norm(b) + 1e-9)) for a, b in zip(batched, alone, strict=True)
        )
        bound, measure = 3e-2, "rel-L2"
    timings = []
    for batch in (1, 8, 32):
        ms = timed(lambda batch=batch: decoder.decode(windows[:batch]), args.device, 5)
        timings.append(f"batch {batch}: {ms:.1f} ms ({ms / batch:.1f} per window)")
    report(
        f"code2wav {dtype}: batched graph == one at a time",
        worst <= bound,
        f"{measure} {worst:.1e}; windows of 25 frames + 25 left + 2 ahead: " + ", ".join(timings),
    )


@contextlib.contextmanager
def exact_float32(device: str, dtype: str):
    """TF32 off for a float32 comparison on CUDA (cuDNN's convolutions use it by default)."""
    if dtype != "float32" or not device.startswith("cuda"):
        yield
        return
    import torch

    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def _with_dtype(stage_deploy, dtype: str):
    import msgspec

    return msgspec.structs.replace(stage_deploy, dtype=dtype)


def free(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--model-dir", help="default: the real-shape qwen3_omni_30b_a3b configs, written to a temporary folder"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 on CPU")
    parser.add_argument("--load-format", default="dummy", choices=["dummy", "auto"])
    parser.add_argument(
        "--compile", action="store_true", help="the talker's options.compile (its layers and the code predictor's)"
    )
    parser.add_argument("--skip", nargs="*", default=[], choices=["moe", "thinker", "talker", "code2wav"])
    args = parser.parse_args()
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    import torch

    from stages.models.qwen3_omni import config

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        if args.model_dir is None:
            from stages.tiny import REAL_SHAPES, build_all

            args.model_dir = str(
                build_all(tmp, only=["qwen3_omni_30b_a3b"], builders=REAL_SHAPES)["qwen3_omni_30b_a3b"]
            )
        run_checks(args, config(args.model_dir))


def run_checks(args, whole) -> None:
    began = time.perf_counter()
    for name, check in (("moe", check_moe_blocks), ("thinker", check_thinker), ("talker", check_talker)):
        if name not in args.skip:
            check(args, whole)
            free(args.device)
    if "code2wav" not in args.skip:
        check_code2wav(args)
    failed = [name for name, passed, _ in RESULTS if not passed]
    print(
        f"\n{len(RESULTS) - len(failed)}/{len(RESULTS)} checks passed in {time.perf_counter() - began:.0f} s",
        flush=True,
    )
    if failed:
        print("failed: " + "; ".join(failed), flush=True)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
