"""Qwen2.5-Omni token2wav (DiT ODE + BigVGAN) chunk windows: cost per window, eager against CUDA graphs.

    python benchmarks/token2wav_windows.py --device cuda

The real checkpoint's token2wav dimensions (transformers' defaults, 8448 codes), random weights. For
each dtype, the time of one window decode (the first chunk of 5 frames + 12 look-ahead, a steady chunk
of 25 frames with 48 frames of left context, one of 50) at batch 1, 4 and 8, eager and with the ODE
replayed from a CUDA graph, printed as ms and as seconds of compute per second of audio, with the
graph's speed-up over eager in the same run and the largest difference between their samples.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

WINDOWS = {"first 5+12": (0, 5), "steady 25": (100, 125), "steady 50": (100, 150)}
SECONDS_PER_FRAME = 0.02


def build_decoder(device: str, dtype: torch.dtype):
    from transformers import Qwen2_5OmniToken2WavConfig, Qwen2_5OmniToken2WavModel

    from stages.generation.token2wav import Token2WavDecoder

    config = Qwen2_5OmniToken2WavConfig(dit_config=dict(num_embeds=8448))
    torch.manual_seed(0)
    with torch.device(device):
        module = Qwen2_5OmniToken2WavModel(config).to(dtype).eval()
    dit = config.dit_config
    speakers = {
        "Chelsie": {
            "bos_token": 1,
            "cond": torch.randn(1, dit.enc_emb_dim),
            "ref_mel": torch.randn(1, 300, dit.mel_dim),
        }
    }
    return Token2WavDecoder(module, speakers, device=device, max_frames=2048)


def time_window(decoder, streams, start: int, end: int, device: str, repeats: int) -> tuple[float, list]:
    from stages.generation.engine import Window

    windows = [Window(stream, start, end, final=False) for stream in streams]
    audio = decoder.decode(windows)  # warm-up (and, with graphs, the capture)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(repeats):
        audio = decoder.decode(windows)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - began) / repeats, audio


def main() -> None:
    from stages.generation.engine import CodeStream
    from stages.protocol import StageRequest

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtypes", nargs="+", default=["float32"])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    for dtype_name in args.dtypes:
        decoder = build_decoder(args.device, getattr(torch, dtype_name))
        graphs = decoder.graphs
        for batch in args.batches:
            streams = [
                CodeStream(
                    f"r{i}",
                    decoder.open(StageRequest(request_id=f"r{i}", params={"voice": "Chelsie"})),
                    frames=rng.integers(0, 8000, 700).tolist(),
                )
                for i in range(batch)
            ]
            for name, (start, end) in WINDOWS.items():
                decoder.graphs = None
                eager, eager_audio = time_window(decoder, streams, start, end, args.device, args.repeats)
                decoder.graphs = graphs
                line = f"{dtype_name:9s} batch {batch} {name:11s} eager {eager * 1e3:8.1f} ms"
                if graphs is not None:
                    graphed, audio = time_window(decoder, streams, start, end, args.device, args.repeats)
                    diff = max(float(np.abs(a - b).max()) for a, b in zip(audio, eager_audio, strict=True))
                    line += f"  graphs {graphed * 1e3:8.1f} ms ({eager / graphed:5.2f}x, max |diff| {diff:.2e})"
                else:
                    graphed = eager
                seconds = batch * (end - start) * SECONDS_PER_FRAME
                print(f"{line}  {graphed / seconds:6.3f} s per audio s", flush=True)
        del decoder
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
