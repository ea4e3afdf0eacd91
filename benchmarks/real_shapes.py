"""Real-shape omni models with dummy weights on a GPU: build seconds, parameters, memory, one short request.

    python3 benchmarks/real_shapes.py [--models qwen2_5_omni_7b qwen3_omni_30b_a3b] [--device cuda]

For each model, one after the other (the first freed before the next): its real-shape directory is
written (`python -m stages.tiny --real-shapes`: the published configs with tokenizer and processor files,
a few MB, no weights), and the offline API builds every stage with `load_format: dummy`, each stage's
model built on the device with seeded random weights (no weight file read, nothing materialised on the
CPU first). Printed per model: the parameters of the built stages (counted over the engines' modules)
against the published total, the GPU memory held after the build (weights, KV caches, graph pools) and
its peak, the build seconds (all stages, CUDA graph captures included), then a warm-up request and a
timed one through every stage (greedy, fixed lengths: `--text` tokens, `--codes` codec frames): text
tokens, audio seconds, TTFT, TTFP and E2EL. A model that fails is reported and the next one still runs.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

MESSAGES = [{"role": "user", "content": "Tell me a short story about the sea."}]


def deploy_config(device: str, graphs: bool) -> dict:
    ar = {
        "device": device,
        "dtype": "bfloat16",
        "max_batch": 4,
        "max_length": 1024,
        "kv_memory_mb": 2048,
        "options": {"cuda_graphs": graphs},
    }
    code2wav = {"device": device, "dtype": "float32", "max_batch": 4, "max_length": 2048}
    return {"hop_timeout_s": 600, "stages": {"thinker": ar, "talker": ar, "code2wav": code2wav}}


def built_parameters(omni) -> dict[str, int]:
    """Parameters of each stage's engine: every distinct parameter of the modules it holds."""
    return {name: _parameters_of(replica.engine) for name, replica in omni.engine._driver.replicas.items()}


def _parameters_of(root) -> int:
    seen_objects, seen_params, total = set(), set(), 0
    frontier = [root]
    for _depth in range(5):
        found = []
        for obj in frontier:
            if id(obj) in seen_objects or isinstance(obj, torch.Tensor | str | bytes | int | float):
                continue
            seen_objects.add(id(obj))
            if isinstance(obj, torch.nn.Module):
                for param in obj.parameters():
                    if id(param) not in seen_params:
                        seen_params.add(id(param))
                        total += param.numel()
                continue
            if isinstance(obj, dict):
                found += list(obj.values())
            elif isinstance(obj, list | tuple | set):
                found += list(obj)
            elif hasattr(obj, "__dict__"):
                found += list(vars(obj).values())
        frontier = found
    return total


def one_request(omni, args) -> dict:
    started = time.perf_counter()
    (result,) = omni.generate(
        MESSAGES,
        {"temperature": 0, "max_tokens": args.text, "min_tokens": args.text},
        stage_sampling={"talker": {"temperature": 0, "max_tokens": args.codes, "min_tokens": args.codes}},
    )
    return {
        "text_tokens": len(result.token_ids),
        "audio_s": 0.0 if result.audio is None else result.audio.size / 24000,
        "ttft_s": result.metrics.get("ttft_s", float("nan")),
        "ttfp_s": result.metrics.get("ttfp_s", float("nan")),
        "e2el_s": time.perf_counter() - started,
    }


def run_model(name: str, root: Path, args) -> None:
    from stages import Omni
    from stages.tiny import REAL_SHAPES, build_all
    from stages.tiny.real_shapes import PUBLISHED

    model_dir = build_all(root, only=[name], builders=REAL_SHAPES)[name]
    files = sum(path.stat().st_size for path in model_dir.rglob("*") if path.is_file())
    print(f"\n{name}: {model_dir} ({files / 2**20:.1f} MiB of configs, tokenizer, processor)", flush=True)
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    started = time.perf_counter()
    omni = Omni(model_dir, deploy=deploy_config(args.device, not args.no_graphs), load_format="dummy")
    try:
        torch.cuda.synchronize()
        build_s = time.perf_counter() - started
        counts = built_parameters(omni)
        total = sum(counts.values())
        published = PUBLISHED[name]["total"]
        held, peak = torch.cuda.memory_allocated() - before, torch.cuda.max_memory_allocated() - before
        stages = ", ".join(f"{stage} {count / 1e9:.3f}B" for stage, count in counts.items())
        print(f"{name}: built in {build_s:.1f} s; parameters {total:,} ({stages})", flush=True)
        print(f"{name}: {total / published:.4f} of the published {published / 1e9:.2f}B", flush=True)
        print(f"{name}: GPU memory held {held / 2**30:.1f} GiB, peak during the build {peak / 2**30:.1f} GiB")
        for label in ("warm-up", "timed"):
            figures = one_request(omni, args)
            print(
                f"{name}: {label:8s} {figures['text_tokens']} text tokens, {figures['audio_s']:.2f} s of audio, "
                f"TTFT {figures['ttft_s']:.3f} s, TTFP {figures['ttfp_s']:.3f} s, E2EL {figures['e2el_s']:.2f} s",
                flush=True,
            )
    finally:
        omni.close()
        del omni
        gc.collect()
        torch.cuda.empty_cache()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["qwen2_5_omni_7b", "qwen3_omni_30b_a3b"])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--text", type=int, default=16, help="text tokens of each request")
    parser.add_argument("--codes", type=int, default=64, help="codec frames of each request")
    parser.add_argument("--no-graphs", action="store_true", help="AR stages without CUDA graphs")
    parser.add_argument("--dir", help="where the real-shape directories go (default: a temp dir)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("needs a CUDA device (a real-shape model does not fit this machine's memory otherwise)")
    print(f"{torch.cuda.get_device_name(args.device)}, torch {torch.__version__}", flush=True)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.dir or tmp)
        for name in args.models:
            try:
                run_model(name, root, args)
            except Exception:
                failed += 1
                print(f"{name}: FAILED\n{traceback.format_exc()}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
