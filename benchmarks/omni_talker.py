"""The Qwen2.5-Omni talker stage alone: time per codec frame against the replay of its decode graph.

    python benchmarks/omni_talker.py --device cuda [--frames 512] [--profile] [--compile]

Qwen2.5-Omni-7B's talker (the real-shape directory `qwen2_5_omni_7b` of `python -m stages.tiny
--real-shapes`, built by the family's own loader with `load_format: dummy`: random bf16 weights on the
device, no file read; `--layers` cuts its decoder) on the AR engine with CUDA graphs, fed one request whose thinker rows are all there (so nothing waits for a thinker), greedy,
`--frames` codes. Prints ms per frame with the talker's default repetition penalty (1.05) and without,
then the replay of the batch-1 decode graph alone, the floor a step cannot go below without fewer or
fused kernels, and the step's ratio to it. `--profile` adds a cProfile of the host side of one run
(where the host waits, and on what). `--compile` then builds the same talker with `options.compile`
(its decoder layers compiled, one graph shared by all) and prints its figures and the ratio of the
two per-frame times. On a CPU there is no graph: only the per-frame times (with `--compile`, both
talkers run the graph step uncaptured).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

THINKER_WIDTH = 3584
REAL_SHAPE = "qwen2_5_omni_7b"


def talker_dir(layers: int) -> Path:
    """The real-shape Qwen2.5-Omni-7B configs (written once under the temp dir), the talker cut to `layers`."""
    from transformers import Qwen2_5OmniConfig

    from stages.tiny import REAL_SHAPES, build_all

    root = Path(tempfile.gettempdir()) / "omnistage_real_shapes"
    model_dir = build_all(root, only=[REAL_SHAPE], builders=REAL_SHAPES)[REAL_SHAPE]
    config = Qwen2_5OmniConfig.from_pretrained(model_dir)
    if config.talker_config.num_hidden_layers == layers:
        return model_dir
    cut = root / f"{REAL_SHAPE}_talker_{layers}_layers"
    if not (cut / "config.json").is_file():
        import shutil

        shutil.copytree(model_dir, cut, dirs_exist_ok=True)
        config.talker_config.num_hidden_layers = layers
        config.talker_config.layer_types = config.talker_config.layer_types[:layers]
        config.save_pretrained(cut)
    return cut


def build_talker(device: str, layers: int, max_batch: int = 8, options: dict | None = None):
    from stages.config import StageDeployConfig
    from stages.models.qwen2_5_omni import build_talker as family_talker

    deploy = StageDeployConfig(
        device=device,
        dtype="bfloat16" if device.startswith("cuda") else "float32",
        max_batch=max_batch,
        max_length=1024,
        kv_memory_mb=1024,
        options=options or {},
        load_format="dummy",
    )
    return family_talker(talker_dir(layers), deploy)


def talker_request(index: int, frames: int, penalty: float | None):
    from stages.protocol import RequestOptions, SamplingParams, StageRequest
    from stages.tensors import to_wire

    prompt, generated = 40, 128

    def rows():
        return to_wire(torch.randn(prompt + generated, THINKER_WIDTH, dtype=torch.bfloat16))

    return StageRequest(
        request_id=f"talker-{index}",
        stage_id=1,
        prompt_token_ids=list(range(1000, 1000 + generated)),
        payloads={"embeds": rows(), "hidden": rows()},
        options=RequestOptions(voice="Chelsie"),
        params={"thinker_prompt_ids": list(range(prompt))},
        sampling=SamplingParams(temperature=0, max_tokens=frames, min_tokens=frames, repetition_penalty=penalty),
    )


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def seconds_per_frame(stage, request, device: str, profile: cProfile.Profile | None = None) -> float:
    stage.add_request(request)
    synchronize(device)
    began, frames = time.perf_counter(), 0
    if profile:
        profile.enable()
    while stage.has_unfinished():
        frames += sum(len(output.token_ids or []) for output in stage.step())
    synchronize(device)
    if profile:
        profile.disable()
    return (time.perf_counter() - began) / frames


def replay_seconds(stage, device: str, replays: int = 300) -> float | None:
    """The batch-1 decode graph replayed alone: the floor of a step without fewer or fused kernels."""
    graphs = stage.engine.runner.graphs
    if graphs is None or graphs.sizes[0] not in graphs.steps.graphs:
        return None
    graph = graphs.steps.graphs[graphs.sizes[0]]
    synchronize(device)
    began = time.perf_counter()
    for _ in range(replays):
        graph.replay()
    synchronize(device)
    return (time.perf_counter() - began) / replays


def measure(args, compile_step: bool) -> float:
    options = {"compile": compile_step}
    if args.compile and not args.device.startswith("cuda"):
        options["cuda_graphs"] = "uncaptured"  # no graphs on a CPU: both run the graph step eagerly
    began = time.perf_counter()
    stage = build_talker(args.device, args.layers, options=options)
    seconds_per_frame(stage, talker_request(0, 16, None), args.device)  # warm-up (and, uncaptured, compilation)
    name = "compiled layers" if compile_step else "uncompiled"
    print(f"{name}: built, captured and warmed up in {time.perf_counter() - began:.1f} s")
    with_penalty = seconds_per_frame(stage, talker_request(1, args.frames, None), args.device)
    without = seconds_per_frame(stage, talker_request(2, args.frames, 1.0), args.device)
    print(f"{name}: {with_penalty * 1e3:.2f} ms per frame (repetition penalty 1.05), {without * 1e3:.2f} without")
    floor = replay_seconds(stage, args.device)
    if floor is not None:
        print(
            f"{name}: decode graph replay alone (batch 1): {floor * 1e3:.2f} ms; a step is {with_penalty / floor:.2f}x it"
        )
    if args.profile:
        profile = cProfile.Profile()
        seconds_per_frame(stage, talker_request(3, args.frames, None), args.device, profile)
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)
    return with_penalty


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--frames", type=int, default=512)
    parser.add_argument("--layers", type=int, default=24, help="the 7B talker has 24")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--compile", action="store_true", help="also run the talker with options.compile and compare")
    args = parser.parse_args()
    uncompiled = measure(args, compile_step=False)
    if args.compile:
        compiled = measure(args, compile_step=True)
        print(f"compiled layers: a frame takes {compiled / uncompiled:.2f}x the uncompiled talker's")


if __name__ == "__main__":
    main()
