"""Compile time of the AR decode step: one compiled decoder layer shared by all (the engine's
`options.compile`) against torch.compile over the whole step, for models of different depths.

    python benchmarks/decode_compile.py --device cuda [--layers 4 24] [--max-batch 4]

Qwen2.5-Omni-7B's talker (the real-shape configs with random weights, `load_format: dummy`; see
omni_talker.py) cut to `--layers` decoder layers.
For each depth and way, with Dynamo reset and Inductor's caches off (every compilation is cold),
the seconds from the first decode step of each graph batch size (largest first, as capture runs)
to its output, minus the same steps run eagerly, and the number of graphs compiled. The whole-step
variant is what `options.compile` did before (`torch.compile(decode_step, dynamic=True)`): its
compile time grows with depth, the per-layer one should not.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")

import torch  # noqa: E402


def decode_seconds(graphs, device: str) -> float:
    began = time.perf_counter()
    for size in reversed(graphs.sizes):
        graphs._forward(size)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - began


def measure(layers: int, way: str, device: str, max_batch: int) -> tuple[float, int]:
    from omni_talker import build_talker
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    stage = build_talker(device, layers, max_batch=max_batch, options={"cuda_graphs": "uncaptured"})
    graphs = stage.engine.runner.graphs
    with torch.inference_mode():
        eager = decode_seconds(graphs, device)
        before = counters["stats"]["unique_graphs"]
        if way == "whole step":
            graphs._decode_step = torch.compile(graphs._decode_step, dynamic=True)
        else:
            from stages.ar.compiled_layers import CompiledLayers

            graphs.compiled = CompiledLayers(stage.engine.adapter.model)
        compiled = decode_seconds(graphs, device)
    return compiled - eager, counters["stats"]["unique_graphs"] - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--layers", type=int, nargs="+", default=[4, 24])
    parser.add_argument("--max-batch", type=int, default=4, help="graph batch sizes up to this (1, 2, 4 by default)")
    args = parser.parse_args()
    # Inductor's import and its compile workers' start, paid once, before anything is timed.
    torch.compile(lambda x: x.sin() + 1)(torch.ones(4, device=args.device))
    results = {}
    for layers in args.layers:
        for way in ("per layer", "whole step"):
            seconds, graphs = measure(layers, way, args.device, args.max_batch)
            results[layers, way] = seconds
            print(f"{layers:3d} layers, {way:10s}: {seconds:7.1f} s to compile, {graphs} graphs", flush=True)
    for layers in args.layers:
        ratio = results[layers, "whole step"] / results[layers, "per layer"]
        print(f"{layers:3d} layers: whole step takes {ratio:.1f}x as long to compile as one shared layer")


if __name__ == "__main__":
    main()
