"""Qwen2.5-Omni's code2wav stage (token2wav) streaming under concurrency, against a whole-sequence decode.

    python benchmarks/code2wav_streaming.py [--model-dir var/models/qwen2_5_omni] [--concurrency 1 4 8]
    python benchmarks/code2wav_streaming.py --device cuda [--concurrency 1 8 16]   # real shapes, dummy weights

The stage's engine (the family's `build_token2wav`, its window policy and, on CUDA, its GPU defaults
and warm-up) serves `concurrency` requests of `--frames` codec frames each, all arriving at once,
their frames streaming in as a talker would make them (`--talker-fps` frames per second per request;
audio plays at 50 frames per second). Each policy runs: `fixed` (a first window, then equal windows of
`async_chunk_size`: the stage without growth) and `growing` (the stage's default policy). Baseline,
measured in the same run: each request's codes decoded as one whole sequence, one request at a time.

Each policy serves one untimed round first (first-seen window shapes, allocations), then `--repeats`
runs per concurrency, each right after a baseline decode of the same requests. Per run: TTFP (mean
time from arrival to a request's first audio), RTF (mean time from arrival to its last audio over its
audio's duration), late (mean seconds of playback a request's client waited for
audio after its first audio, playing in real time), throughput (requests per second of the run),
decode compute per second of audio, its ratio to the baseline taken just before it, and the frames the
windows decoded (left context and look-ahead included) per frame of audio (1.00 for a whole decode);
printed as medians over the runs, with the range of the ratio.
`tiny models: python -m stages.tiny var/models` builds the CPU model directory.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

SECONDS_PER_FRAME = 0.02


def model_dir(args) -> str:
    if args.device == "cpu":
        return args.model_dir
    from stages.tiny import REAL_SHAPES, build_all

    root = Path(tempfile.gettempdir()) / "omnistage_real_shapes"
    return str(build_all(root, only=["qwen2_5_omni_7b"], builders=REAL_SHAPES)["qwen2_5_omni_7b"])


def build(args, policy: str, max_batch: int):
    from stages.config import StageDeployConfig
    from stages.models.qwen2_5_omni import build_token2wav

    options = {} if policy == "growing" else {"window_max": args.chunk}
    deploy = StageDeployConfig(
        device=args.device,
        max_batch=max_batch,
        max_length=max(args.frames, 256),
        first_chunk_size=args.first_chunk,
        async_chunk_size=args.chunk,
        load_format="auto" if args.device == "cpu" else "dummy",
        options=options,
    )
    return build_token2wav(args.model, deploy)


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def baseline(engine, codes: list[list[int]], device: str) -> float:
    """Seconds of decode per second of audio when each request is decoded whole, one at a time."""
    from stages.diffusion_knobs import DiffusionKnobs
    from stages.generation.engine import CodeStream, Window
    from stages.protocol import RequestOptions, StageRequest

    decoder = engine.decoder
    stream = CodeStream("warm", decoder.open(StageRequest(request_id="warm")), codes[0])
    decoder.decode([Window(stream, 0, len(codes[0]), final=True)])  # a first shape's capture is not the baseline
    synchronize(device)
    began = time.perf_counter()
    for index, values in enumerate(codes):
        request = StageRequest(request_id=f"whole{index}", options=RequestOptions(diffusion=DiffusionKnobs(seed=index)))
        stream = CodeStream(request.request_id, decoder.open(request), values)
        decoder.decode([Window(stream, 0, len(values), final=True)])
    synchronize(device)
    return (time.perf_counter() - began) / (len(codes) * len(codes[0]) * SECONDS_PER_FRAME)


def serve(engine, codes: list[list[int]], talker_fps: float, device: str) -> dict:
    """All requests arrive at once; each one's frames come in at `talker_fps`; the engine steps until done."""
    from stages.diffusion_knobs import DiffusionKnobs
    from stages.protocol import RequestOptions, StageRequest

    begin, decode_s, span_frames = engine.decoder.begin, [0.0], [0]

    def timed_begin(windows):
        """The decode's pieces, each timed to the end of its work on the device."""
        span_frames[0] += sum(end - start for start, end in map(engine.decoder._span, windows))
        pieces = begin(windows)
        while True:
            began = time.perf_counter()
            try:
                piece = next(pieces)
            except StopIteration:
                return
            finally:
                synchronize(device)
                decode_s[0] += time.perf_counter() - began
            yield piece

    engine.decoder.begin = timed_begin
    names = [f"r{index}" for index in range(len(codes))]
    fed, seqs = dict.fromkeys(names, 0), dict.fromkeys(names, 0)
    first, last, sent, late = {}, {}, dict.fromkeys(names, 0), dict.fromkeys(names, 0.0)
    began = time.perf_counter()
    while not last or engine.has_unfinished():
        now = time.perf_counter() - began
        for index, name in enumerate(names):
            due = len(codes[index]) if talker_fps <= 0 else min(len(codes[index]), int(now * talker_fps) + 1)
            if due > fed[name]:
                request = StageRequest(
                    request_id=name,
                    stage_id=2,
                    seq=seqs[name],
                    finished=due == len(codes[index]),
                    prompt_token_ids=codes[index][fed[name] : due],
                    options=RequestOptions(diffusion=DiffusionKnobs(seed=index)),
                )
                (engine.add_chunk if fed[name] else engine.add_request)(request)
                fed[name], seqs[name] = due, seqs[name] + 1
        outputs = engine.step()
        if not outputs and not engine.last_step.batch:
            time.sleep(0.001)  # waiting for frames
        for output in outputs:
            assert output.error is None, output.error
            at = time.perf_counter() - began
            name = output.request_id
            if name in first:
                late[name] += max(0.0, at - (first[name] + sent[name] * SECONDS_PER_FRAME + late[name]))
            first.setdefault(name, at)
            start, end = output.params["frames"]
            sent[name] += end - start
            if output.finished:
                last[name] = at
        if len(last) == len(names):
            break
    engine.decoder.begin = begin
    elapsed = time.perf_counter() - began
    audio_s = sum(len(values) for values in codes) * SECONDS_PER_FRAME
    return {
        "ttfp": float(np.mean(list(first.values()))),
        "rtf": float(np.mean([last[name] / (len(codes[i]) * SECONDS_PER_FRAME) for i, name in enumerate(names)])),
        "late": float(np.mean(list(late.values()))),
        "throughput": len(codes) / elapsed,
        "compute": decode_s[0] / audio_s,
        "decoded": span_frames[0] / sum(len(values) for values in codes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", default="var/models/qwen2_5_omni")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--frames", type=int, default=64, help="codec frames per request (50 per second of audio)")
    parser.add_argument("--talker-fps", type=float, default=150.0, help="frames per second per request; 0: at once")
    parser.add_argument("--first-chunk", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=25)
    parser.add_argument("--policies", nargs="+", default=["fixed", "growing"], choices=["fixed", "growing"])
    parser.add_argument("--repeats", type=int, default=3, help="runs per concurrency, each beside its own baseline")
    args = parser.parse_args()
    if args.device == "cpu":
        import torch

        torch.set_num_threads(2)
    args.model = model_dir(args)
    rng = np.random.default_rng(0)
    codes = [rng.integers(0, 8192, args.frames).tolist() for _ in range(max(args.concurrency))]
    for policy in args.policies:
        engine = build(args, policy, max(args.concurrency))
        serve(engine, codes, args.talker_fps, args.device)  # warm-up: first-seen shapes, allocations
        for concurrency in args.concurrency:
            runs = []
            for _ in range(args.repeats):  # each run beside a baseline of its own, taken just before it
                whole = baseline(engine, codes[:concurrency], args.device)
                runs.append((whole, serve(engine, codes[:concurrency], args.talker_fps, args.device)))
            print_runs(policy, concurrency, runs)


def print_runs(policy: str, concurrency: int, runs: list[tuple[float, dict]]) -> None:
    """Medians over the runs; the compute ratio is each run's against its own baseline."""
    median = lambda values: float(np.median(values))  # noqa: E731
    field = lambda name: median([result[name] for _, result in runs])  # noqa: E731
    ratios = sorted(result["compute"] / whole for whole, result in runs)
    print(
        f"{policy:8s} concurrency {concurrency:2d}  TTFP {field('ttfp'):6.3f} s  RTF {field('rtf'):6.3f}"
        f"  late {field('late'):6.3f} s  {field('throughput'):6.2f} req/s  compute {field('compute'):6.3f} s per"
        f" audio s, whole decode {median([whole for whole, _ in runs]):6.3f}: {median(ratios):4.2f}x whole"
        f" ({ratios[0]:4.2f}-{ratios[-1]:4.2f}x in {len(runs)} runs; {field('decoded'):4.2f} frames decoded per frame)",
        flush=True,
    )


if __name__ == "__main__":
    main()
