"""Small decode steps beside a GPU-filling load: the load on all SMs vs confined to a green context.

    python benchmarks/sm_partition.py [--sms 112 96] [--seconds 3]

Two parts, no model weights (random bf16 matrices of the 7B Qwen2.5-Omni's shapes):

- Confinement: a DiT-like batch of GEMMs (16 windows x 328 positions x the DiT's hidden 1024 and MLP
  2048) timed on an ordinary stream and on a stream of `stages/sm_partition.py` with each `--sms`:
  eager, and as a CUDA graph replayed there (captured on an ordinary stream, and on the partitioned
  stream). Confined to k of the device's n SMs, the GEMMs take about n/k as long; as fast as
  unconfined means the partition is not applied.
- Interference: a talker-like decode step (24 layers of hidden 896 and MLP 4864 for 16 rows, one CUDA
  graph, on a high-priority stream as the AR stages run) stepped in a loop, alone, then beside the
  DiT-like load (one graph) looping on another thread: on an ordinary stream, then on a partitioned
  one of each `--sms`. Prints the decode step's mean time and the load's iterations per second beside
  it and alone.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from background_load import Background  # noqa: E402

from stages.sm_partition import partition_size, partitioned_stream  # noqa: E402

TALKER = {"hidden": 896, "qkv": 896 + 2 * 128, "intermediate": 4864, "layers": 24, "rows": 16}
DIT = {"rows": 16 * 328 * 2, "hidden": 1024, "intermediate": 2048, "layers": 22}


def weights(*shapes, device):
    return [torch.randn(*shape, device=device, dtype=torch.bfloat16) * 0.02 for shape in shapes]


class TalkerLikeStep:
    def __init__(self, device: str):
        t = TALKER
        self.x = torch.randn(t["rows"], t["hidden"], device=device, dtype=torch.bfloat16)
        self.w = weights(
            (t["hidden"], t["qkv"]), (t["hidden"], t["hidden"]), (t["hidden"], 2 * t["intermediate"]),
            (t["intermediate"], t["hidden"]), device=device,
        )  # fmt: skip
        self.stream = torch.cuda.Stream(device=device, priority=-1)
        self.graph = capture(self.forward, self.stream)

    def forward(self) -> None:
        qkv, out, gate_up, down = self.w
        x = self.x
        for _ in range(TALKER["layers"]):
            h = (x @ qkv)[:, : x.shape[1]] @ out + x
            gate, up = (h @ gate_up).chunk(2, dim=-1)
            x = torch.nn.functional.silu(gate) * up @ down + h
        self.out = x

    def mean_step(self, seconds: float) -> float:
        steps, began = 0, time.perf_counter()
        with torch.cuda.stream(self.stream):
            while time.perf_counter() - began < seconds:
                self.graph.replay()
                self.stream.synchronize()
                steps += 1
        return (time.perf_counter() - began) / steps


class DitLikeLoad:
    def __init__(self, device: str):
        d = DIT
        self.x = torch.randn(d["rows"], d["hidden"], device=device, dtype=torch.bfloat16)
        self.w = weights((d["hidden"], 3 * d["hidden"]), (d["hidden"], d["hidden"]), (d["hidden"], d["intermediate"]),
                         (d["intermediate"], d["hidden"]), device=device)  # fmt: skip

    def forward(self) -> None:
        qkv, out, up, down = self.w
        x = self.x
        for _ in range(DIT["layers"]):
            h = (x @ qkv)[:, : x.shape[1]] @ out + x
            x = torch.nn.functional.gelu(h @ up) @ down + h
        self.out = x


def capture(function, stream) -> torch.cuda.CUDAGraph:
    with torch.cuda.stream(stream):
        function()  # lazy initialisations outside the capture
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        function()
    return graph


def timed(run, stream, repeats: int = 5) -> float:
    with torch.cuda.stream(stream):
        run()
        stream.synchronize()
        began = time.perf_counter()
        for _ in range(repeats):
            run()
        stream.synchronize()
    return (time.perf_counter() - began) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--sms", type=int, nargs="+", default=[112, 96, 64])
    parser.add_argument("--seconds", type=float, default=3.0, help="how long each interference condition runs")
    args = parser.parse_args()
    device = args.device
    total = torch.cuda.get_device_properties(device).multi_processor_count
    load = DitLikeLoad(device)
    plain = torch.cuda.Stream(device=device)
    partitions = {}
    for sms in args.sms:
        stream = partitioned_stream(device, sms)
        if stream is None:
            sys.exit(f"no green context of {sms} SMs on {device} (the warning above says why)")
        partitions[sms] = stream

    print(f"{torch.cuda.get_device_name(device)}: {total} SMs", flush=True)
    print("confinement: the DiT-like GEMMs' time on k SMs against all (about n/k when confined)", flush=True)
    graph_plain = capture(load.forward, plain)
    whole = timed(load.forward, plain)
    whole_graph = timed(graph_plain.replay, plain)
    print(f"  all {total} SMs: eager {whole * 1e3:.2f} ms, graph {whole_graph * 1e3:.2f} ms", flush=True)
    for sms, stream in partitions.items():
        got = partition_size(device, sms)
        eager = timed(load.forward, stream)
        replayed = timed(graph_plain.replay, stream)
        graph_own = capture(load.forward, stream)
        own = timed(graph_own.replay, stream)
        print(
            f"  {got} SMs (asked {sms}, n/k {total / got:.2f}): eager {eager / whole:.2f}x, graph captured elsewhere "
            f"{replayed / whole_graph:.2f}x, captured on the partition {own / whole_graph:.2f}x",
            flush=True,
        )

    talker = TalkerLikeStep(device)
    alone = talker.mean_step(args.seconds)
    print(f"interference: talker-like decode step (graph, high priority) alone {alone * 1e3:.3f} ms", flush=True)
    load_graph = {
        None: capture(load.forward, plain),
        **{sms: capture(load.forward, s) for sms, s in partitions.items()},
    }
    for sms, stream in [(None, plain), *partitions.items()]:
        with Background(load_graph[sms].replay, stream) as background:
            time.sleep(args.seconds)
        load_alone = background.rate
        with Background(load_graph[sms].replay, stream) as background:
            step = talker.mean_step(args.seconds)
        where = f"all {total} SMs" if sms is None else f"{partition_size(device, sms)} SMs"
        print(
            f"  beside the load on {where:>11}: step {step * 1e3:.3f} ms ({step / alone:.2f}x alone), "
            f"load {background.rate:.1f} it/s ({load_alone:.1f} alone)",
            flush=True,
        )


if __name__ == "__main__":
    main()
