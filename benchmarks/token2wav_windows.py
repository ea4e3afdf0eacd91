"""Qwen2.5-Omni token2wav (DiT ODE + BigVGAN) chunk windows: cost per window by precision and length.

    python benchmarks/token2wav_windows.py --device cuda [--modes float32 dit-bf16 all-bf16 bfloat16] [--eager] [--compile]

The real checkpoint's token2wav (the real-shape directory `qwen2_5_omni_7b` of `python -m stages.tiny
--real-shapes`, loaded by the family's loader with `load_format: dummy`: random weights built on the
device, the same seed for every precision, and the directory's voices). Precisions: `float32` (what
transformers runs and the oracle tests check), `dit-bf16` (float32 weights, the DiT's matmuls under bfloat16 autocast: option
`token2wav_dit_autocast`), `all-bf16` (BigVGAN's convolutions too: `token2wav_vocoder_autocast`),
`bfloat16` (bf16 weights). For each window (the first chunk of 5 frames + 12 look-ahead, steady
chunks of 25, 50, 100 and 200 frames with 48 frames of left context) at each batch size: the first
decode of its shape (eager plus the CUDA-graph capture), a replayed decode, BigVGAN's share of it,
seconds of compute per second of audio, and the audio's relative L2 difference from the first mode's
(`float32` unless `--modes` leaves it out) in the same run. `--whole-span-vocoder` adds the same decode with
BigVGAN over the window's whole span (the DiT's left context and look-ahead) instead of the
`VOCODER_REACH_MEL` mel frames around the window, and our time against it. `--eager` adds the uncaptured decode, the graph's speed-up over it and the difference
between their audio. `--compile` runs each mode a second time with option `token2wav_compile` (the
DiT's blocks through torch.compile; the first window's "first" then includes the compilation), and with
`--vocoder-compile` that run has `token2wav_vocoder_compile` too (BigVGAN's activations fused and
compiled: its BigVGAN column against the first run's). `--block-attention` adds a third run, compiled
as the second, with option `token2wav_block_attention` (the DiT's attention block by block, no masks:
`+compile+blocks`).
`--profile` then profiles one replayed decode of the last run's first window at the largest batch
(with `--compile`, the compiled run)
(torch.profiler: CUDA kernels on a GPU, CPU ops otherwise): the top kernels by self device time, the
device time by category (GEMM, attention, convolution, other), the decode's wall time and the share of
it the device was busy; with $OUT set, its chrome trace goes to $OUT/token2wav_profile.json (gzipped,
`.json.gz`, when over 8 MiB).

    python benchmarks/token2wav_windows.py --device cuda --modes dit-bf16 --batches 1 8 --profile
    python benchmarks/token2wav_windows.py --device cpu --model-dir var/models/qwen2_5_omni --modes float32 --whole-span-vocoder
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

WINDOWS = {
    "first 5+12": (0, 5),
    "steady 25": (100, 125),
    "steady 50": (100, 150),
    "steady 100": (100, 200),
    "steady 200": (100, 300),
}
MODES = {
    "float32": ("float32", None, None),
    "dit-bf16": ("float32", "bfloat16", None),
    "all-bf16": ("float32", "bfloat16", "bfloat16"),
    "bfloat16": ("bfloat16", None, None),
}
SECONDS_PER_FRAME = 0.02
CATEGORIES = (
    ("attention", ("flash", "fmha", "attention", "sdpa", "softmax")),
    ("convolution", ("conv", "cudnn", "fprop", "dgrad", "implicit_gemm")),
    ("GEMM", ("gemm", "matmul", "cutlass", "sm90", "nvjet", "addmm", "mm")),
)
"""Device-time categories by substrings of the lower-cased kernel (or CPU op) name, first match wins:
cuDNN's fused attention kernels (`cudnn_..._sdpa_..._flash_fprop_...`) also match convolution's
substrings, so attention is tried first; cuDNN's convolution kernels are implicit GEMMs and fused
attention kernels are CUTLASS ones, so both are tried before GEMM; everything else (elementwise,
norms, copies) is "other"."""
PROFILE_TOP = 15
TRACE_MAX_BYTES = 8 * 2**20


def token2wav(device: str, model_dir: str | None = None):
    """The token2wav of `model_dir` with its weights, or else of the real-shape directory `qwen2_5_omni_7b`
    (built once under the temporary directory) with dummy weights drawn from seed 0; float32."""
    from transformers import Qwen2_5OmniToken2WavModel

    from stages.models.omni_weights import load_submodule
    from stages.models.qwen2_5_omni import config
    from stages.tiny import REAL_SHAPES, build_all

    if model_dir is None:
        root = Path(tempfile.gettempdir()) / "omnistage_real_shapes"
        model_dir = str(build_all(root, only=["qwen2_5_omni_7b"], builders=REAL_SHAPES)["qwen2_5_omni_7b"])
        dummy_seed = 0
    else:
        dummy_seed = None
    module = load_submodule(
        model_dir,
        Qwen2_5OmniToken2WavModel,
        config(model_dir).token2wav_config,
        "token2wav.",
        device=device,
        dtype=torch.float32,
        dummy_seed=dummy_seed,
    )
    return model_dir, module


def build_decoder(
    device: str,
    mode: str,
    compile_blocks: bool = False,
    compile_vocoder: bool = False,
    block_attention: bool = False,
    model_dir: str | None = None,
):
    from stages.generation.token2wav import Token2WavDecoder
    from stages.models.qwen2_5_omni import speakers

    dtype, dit_autocast, vocoder_autocast = MODES[mode]
    model_dir, module = token2wav(device, model_dir)
    module = module.to(getattr(torch, dtype))  # drawn in float32 for every mode: the modes differ in precision only
    return Token2WavDecoder(
        module,
        speakers(model_dir),
        device=device,
        max_frames=2048,
        dit_autocast=dit_autocast,
        vocoder_autocast=vocoder_autocast,
        compile_blocks=compile_blocks,
        compile_vocoder=compile_vocoder,
        block_attention=block_attention,
    )


def timed(function, device: str, repeats: int = 1):
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(repeats):
        result = function()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - began) / repeats, result


def vocoder_seconds(decoder, mel_frames: int, batch: int, device: str, repeats: int) -> float:
    """BigVGAN alone on `batch` mels of `mel_frames`, as `decode` runs it (one batched pass)."""
    mel = torch.randn(batch, decoder.dit.config.mel_dim, mel_frames, device=device)

    def run():
        with torch.no_grad(), decoder._autocast(decoder.vocoder_autocast):
            decoder.bigvgan(mel.to(decoder.bigvgan.dtype))

    run()
    return timed(run, device, repeats)[0]


def relative_l2(audio: list[np.ndarray], reference: list[np.ndarray]) -> float:
    error = sum(float(np.sum((a - r) ** 2)) for a, r in zip(audio, reference, strict=True))
    return (error / sum(float(np.sum(r**2)) for r in reference)) ** 0.5


def profile_decode(what: str, decoder, windows: list, device: str) -> None:
    """Profile one decode of `windows` (a shape already decoded, so CUDA graphs replay) and print its
    top kernels, device time by category, wall time and device-busy fraction."""
    import os

    from torch.profiler import ProfilerActivity, profile

    cuda = device.startswith("cuda")
    decoder.decode(windows)  # the shape warm whatever the graphs' cache evicted since
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as profiler:
        wall, _ = timed(lambda: decoder.decode(windows), device)
    kernels = device_times(profiler, cuda)
    busy = sum(total for _, _, total in kernels)
    if not busy:
        print(f"profile: {what}: wall {wall * 1e3:.1f} ms, the profiler recorded no device time", flush=True)
        return
    print(
        f"profile: {what}: wall {wall * 1e3:.1f} ms,"
        f" {'kernels' if cuda else 'CPU ops'} {busy * 1e3:.1f} ms (device busy {busy / wall:.0%}),"
        f" {sum(calls for _, calls, _ in kernels)} {'kernels run' if cuda else 'op calls'}",
        flush=True,
    )
    print(f"  {'self ms':>9s} {'calls':>6s} {'% dev':>6s}  {'kernel' if cuda else 'op'}")
    for name, calls, total in kernels[:PROFILE_TOP]:
        print(f"  {total * 1e3:9.2f} {calls:6d} {total / busy:6.1%}  {name[:60]}")
    by_category = {category: 0.0 for category, _ in CATEGORIES} | {"other": 0.0}
    for name, _, total in kernels:
        by_category[category_of(name)] += total
    print("  by category: " + "  ".join(f"{c} {t * 1e3:.1f} ms ({t / busy:.0%})" for c, t in by_category.items()))
    if os.environ.get("OUT"):
        trace = write_trace(profiler, Path(os.environ["OUT"]) / "token2wav_profile.json")
        print(f"  chrome trace: {trace} ({trace.stat().st_size / 1e6:.1f} MB)", flush=True)


def write_trace(profiler, trace: Path) -> Path:
    """The profile's chrome trace at `trace`, gzipped beside it instead (`.json.gz`, which Perfetto
    opens) when over TRACE_MAX_BYTES: one decode is tens of thousands of kernels or CPU ops."""
    import gzip
    import shutil

    profiler.export_chrome_trace(str(trace))
    if trace.stat().st_size <= TRACE_MAX_BYTES:
        return trace
    packed = trace.with_name(trace.name + ".gz")
    with trace.open("rb") as source, gzip.open(packed, "wb", compresslevel=6) as target:
        shutil.copyfileobj(source, target)
    trace.unlink()
    return packed


def device_times(profiler, cuda: bool) -> list[tuple[str, int, float]]:
    """(name, calls, self seconds) of every kernel (on CUDA; CPU ops otherwise), longest first."""
    from torch.autograd import DeviceType

    kind = DeviceType.CUDA if cuda else DeviceType.CPU
    rows = [
        (event.key, event.count, (event.self_device_time_total if cuda else event.self_cpu_time_total) / 1e6)
        for event in profiler.key_averages()
        if event.device_type == kind
    ]
    return sorted((row for row in rows if row[2] > 0), key=lambda row: -row[2])


def category_of(name: str) -> str:
    lowered = name.lower()
    return next((category for category, parts in CATEGORIES if any(p in lowered for p in parts)), "other")


def main() -> None:
    from stages.diffusion_knobs import DiffusionKnobs
    from stages.generation.engine import CodeStream, Window
    from stages.protocol import RequestOptions, StageRequest

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--batches", type=int, nargs="+", default=[1])
    parser.add_argument("--windows", nargs="+", default=list(WINDOWS), choices=list(WINDOWS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--eager", action="store_true", help="also time the uncaptured decode")
    parser.add_argument("--compile", action="store_true", help="each mode also with its DiT blocks compiled")
    parser.add_argument(
        "--vocoder-compile", action="store_true", help="with --compile: BigVGAN's activations fused and compiled too"
    )
    parser.add_argument(
        "--block-attention",
        action="store_true",
        help="with --compile: a third run, compiled, with options.token2wav_block_attention",
    )
    parser.add_argument(
        "--model-dir",
        help="a Qwen2.5-Omni checkpoint to load, weights and all (e.g. the tiny var/models/qwen2_5_omni on a CPU),"
        " instead of the real-shape one with dummy weights",
    )
    parser.add_argument(
        "--whole-span-vocoder",
        action="store_true",
        help="also time each decode with BigVGAN over the window's whole span instead of VOCODER_REACH_MEL around it",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="after the timed runs, profile one decode of the first run's first window at the largest batch",
    )
    args = parser.parse_args()
    frames = np.random.default_rng(0).integers(0, 8000, 700).tolist()
    reference: dict[tuple, list[np.ndarray]] = {}
    variants = ("", "+compile", "+compile+blocks") if args.block_attention else ("", "+compile")
    runs = [(mode, variant) for mode in args.modes for variant in (variants if args.compile else ("",))]
    profiled = None  # (what, decoder, windows) for --profile: that decoder is kept, warm, past its run
    for mode, variant in runs:
        compiled = bool(variant)
        decoder = build_decoder(
            args.device, mode, compiled, compiled and args.vocoder_compile, variant.endswith("+blocks"), args.model_dir
        )
        label = mode + variant
        graphs = decoder.graphs
        for batch in args.batches:
            streams = [
                CodeStream(
                    f"r{i}",
                    decoder.open(
                        StageRequest(
                            request_id=f"r{i}",
                            options=RequestOptions(voice="Chelsie", diffusion=DiffusionKnobs(seed=i)),
                        )
                    ),
                    frames=frames,
                )
                for i in range(batch)
            ]
            for name in args.windows:
                start, end = WINDOWS[name]
                windows = [Window(stream, start, end, final=False) for stream in streams]
                span = decoder._span(windows[0])
                mel_first, mel_last = decoder._vocoded_mel(windows, [span] * batch)
                first, audio = timed(lambda: decoder.decode(windows), args.device)  # noqa: B023
                replay, audio = timed(lambda: decoder.decode(windows), args.device, args.repeats)  # noqa: B023
                vocoder = vocoder_seconds(decoder, mel_last - mel_first, batch, args.device, args.repeats)
                seconds = batch * (end - start) * SECONDS_PER_FRAME
                reference.setdefault((batch, name), audio)
                line = (
                    f"{label:23s} batch {batch} {name:11s} span {span[1] - span[0]:3d}  first {first * 1e3:7.1f} ms"
                    f"  replay {replay * 1e3:7.1f} ms (BigVGAN {vocoder * 1e3:6.1f})"
                    f"  {replay / seconds:6.3f} s per audio s  rel-L2 vs {runs[0][0]} {relative_l2(audio, reference[(batch, name)]):.1e}"
                )
                if args.whole_span_vocoder:
                    reach, decoder.vocoder_reach = decoder.vocoder_reach, None
                    whole, whole_audio = timed(lambda: decoder.decode(windows), args.device, args.repeats)  # noqa: B023
                    decoder.vocoder_reach = reach
                    line += (
                        f"  BigVGAN on the whole span ({2 * (span[1] - span[0])} mel, not {mel_last - mel_first}):"
                        f" {whole * 1e3:7.1f} ms (ours {replay / whole:4.2f}x, rel-L2 {relative_l2(audio, whole_audio):.1e})"
                    )
                if args.eager:
                    decoder.graphs = None
                    eager, eager_audio = timed(lambda: decoder.decode(windows), args.device, args.repeats)  # noqa: B023
                    decoder.graphs = graphs
                    line += f"  eager {eager * 1e3:7.1f} ms ({eager / replay:4.2f}x, rel-L2 {relative_l2(audio, eager_audio):.1e})"
                print(line, flush=True)
                if args.profile and batch == max(args.batches) and name == args.windows[0]:
                    profiled = (f"{label} batch {batch} {name}", decoder, windows)
        decoder = graphs = None
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    if profiled is not None:
        profile_decode(*profiled, args.device)


if __name__ == "__main__":
    main()
