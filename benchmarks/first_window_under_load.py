"""A first window's decode while autoregressive steps keep the GPU busy: on a normal-priority stream vs the highest.

    python benchmarks/first_window_under_load.py [--batches 1 8 16] [--repeats 5] [--compile]

Token2wav of the real-shape Qwen2.5-Omni-7B directory (dummy weights, the DiT under bfloat16 autocast,
CUDA graphs; `--compile` adds the compiled DiT blocks, block attention and BigVGAN's compiled
activations, as the GPU recipe has them). A batch of first windows (5 frames and 12 of look-ahead) is
decoded piece by piece as the generation engine runs it, in three conditions: on an idle GPU; while a
thread steps a thinker-like load on a high-priority stream (as the AR stages step: 28 decode layers of
the 7B thinker's shapes for `--load-rows` rows, one host sync a step), the decode on the stage's own
normal-priority stream; the same load, each piece of the decode on a stream of the device's highest
priority, ordered after and before the stage's stream (`PriorityStream`). Prints each decode's wall
time (median of `--repeats`), the loaded ones against the idle one, the load's steps per second
meanwhile, and the largest difference between the audio decoded on the two streams.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

THINKER = {"hidden": 3584, "qkv": 3584 + 2 * 512, "intermediate": 18944, "layers": 28}


class ThinkerLikeLoad:
    """Decode steps of the 7B thinker's layer shapes (one layer's weights, read `layers` times a step:
    each read comes from HBM, as a real step's would) on a high-priority stream (looped by `Background`)."""

    def __init__(self, rows: int, device: str):
        shapes = THINKER
        make = lambda *shape: torch.randn(*shape, device=device, dtype=torch.bfloat16) * 0.01  # noqa: E731
        self.x = make(rows, shapes["hidden"])
        self.weights = [
            make(shapes["hidden"], shapes["qkv"]),
            make(shapes["hidden"], shapes["hidden"]),
            make(shapes["hidden"], 2 * shapes["intermediate"]),
            make(shapes["intermediate"], shapes["hidden"]),
        ]
        self.stream = torch.cuda.Stream(device=device, priority=-1)  # the AR stages' (replica_streams.py)

    def step(self) -> None:
        qkv, out, gate_up, down = self.weights
        x = self.x
        for _ in range(THINKER["layers"]):
            h = (x @ qkv)[:, : x.shape[1]] @ out
            gate, up = (h @ gate_up).chunk(2, dim=-1)
            x = torch.nn.functional.silu(gate) * up @ down * 1e-3 + self.x


class PriorityStream:
    """A stream of the device's highest priority that a piece runs on, after everything queued on the
    caller's stream and before anything queued there later."""

    def __init__(self, device: str):
        _, highest = torch.cuda.Stream.priority_range()
        self.stream = torch.cuda.Stream(device=device, priority=highest)

    @contextmanager
    def running(self):
        home = torch.cuda.current_stream(self.stream.device)
        self.stream.wait_stream(home)
        try:
            with torch.cuda.stream(self.stream):
                yield
        finally:
            home.wait_stream(self.stream)


def decode_in_pieces(decoder, windows, stream) -> list[np.ndarray]:
    """The decode as the generation engine runs it: each piece inside `stream`'s context (if any)."""
    pieces = decoder.begin(windows)
    while True:
        with stream.running() if stream is not None else nullcontext():
            audio = next(pieces)
        if audio is not None:
            return audio


def timed_decodes(decoder, windows, stream, repeats: int) -> tuple[float, list[np.ndarray]]:
    times, audio = [], None
    for _ in range(repeats):
        torch.cuda.synchronize()
        began = time.perf_counter()
        audio = decode_in_pieces(decoder, windows, stream)
        times.append(time.perf_counter() - began)
    return statistics.median(times), audio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 16])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--load-rows", type=int, default=16, help="rows of each thinker-like decode step")
    parser.add_argument("--compile", action="store_true", help="the DiT's blocks, block attention, BigVGAN compiled")
    args = parser.parse_args()

    from background_load import Background
    from token2wav_windows import build_decoder

    from stages.generation.engine import CodeStream, Window
    from stages.protocol import StageRequest

    decoder = build_decoder(
        args.device, "dit-bf16", compile_blocks=args.compile, compile_vocoder=args.compile,
        block_attention=args.compile,
    )  # fmt: skip
    highest = PriorityStream(args.device)
    load = ThinkerLikeLoad(args.load_rows, args.device)
    with torch.cuda.stream(torch.cuda.Stream(device=args.device)):  # the stage's own stream, normal priority
        print(f"first window (5 frames + 12 look-ahead), load: thinker-like steps of {args.load_rows} rows", flush=True)
        print(f"{'batch':>5} {'idle':>8} {'loaded':>8} {'ratio':>6} {'load/s':>7} {'highest':>11} {'ratio':>6} "
              f"{'load/s':>7} {'max |diff|':>10}")  # fmt: skip
        for batch in args.batches:
            streams = [
                CodeStream(
                    f"r{i}", decoder.open(StageRequest(request_id=f"r{i}")), [(7 * i + k) % 8000 for k in range(17)]
                )
                for i in range(batch)
            ]
            windows = [Window(stream, 0, 5, final=False) for stream in streams]
            for stream in (None, highest):  # graph captures and compilation happen here, not in the timings
                decode_in_pieces(decoder, windows, stream)
            idle, _ = timed_decodes(decoder, windows, None, args.repeats)
            with Background(load.step, load.stream) as running:
                own, own_audio = timed_decodes(decoder, windows, None, args.repeats)
            own_rate = running.rate
            with Background(load.step, load.stream) as running:
                urgent, urgent_audio = timed_decodes(decoder, windows, highest, args.repeats)
            urgent_rate = running.rate
            diff = max(float(np.abs(a - b).max()) for a, b in zip(own_audio, urgent_audio, strict=True))
            print(f"{batch:>5} {idle:>7.3f}s {own:>7.3f}s {own / idle:>5.2f}x {own_rate:>7.1f} {urgent:>10.3f}s "
                  f"{urgent / idle:>5.2f}x {urgent_rate:>7.1f} {diff:>10.2e}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
