"""BigVGAN of Qwen2.5-Omni's token2wav alone: its anti-aliased activations as transformers runs them,
compiled as one function, and compiled as two kernels (what `token2wav_vocoder_compile` runs).

    .venv/bin/python benchmarks/bigvgan_activations.py [--device cpu] [--batch 2] [--frames 200] [--rounds 4]
    python3 benchmarks/bigvgan_activations.py --device cuda --batch 16 --frames 328

The real checkpoint's BigVGAN (the real-shape directory `qwen2_5_omni_7b`, float32, random weights from a
fixed seed) on `--batch` mels of `--frames` mel frames. The three variants run in turn in every round
(the first round warms and compiles, and is not counted); prints each one's median time and its largest
difference from transformers' audio. Compiled as one function, Inductor fuses SnakeBeta into the
downsampling and recomputes it for each of the filter's taps (stages/generation/anti_aliased_activation.py).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402


def load_bigvgan(device: str):
    from token2wav_windows import token2wav

    return token2wav(device)[1].code2wav_bigvgan_model.eval()


def install(bigvgan, function) -> None:
    """Every fusable activation of `bigvgan` through `function` (None: transformers' forwards)."""
    from stages.generation import anti_aliased_activation as activations

    activations.unfuse_activations(bigvgan)
    if function is None:
        return
    for module in bigvgan.modules():
        if activations.fusable(module):
            module.forward = functools.partial(activations._forward, function, module)


def main() -> None:
    from stages.generation import anti_aliased_activation as activations

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--frames", type=int, default=200, help="mel frames per row (two per codec frame)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of all three; the first is not counted")
    parser.add_argument("--threads", type=int, default=2, help="torch's CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    bigvgan = load_bigvgan(args.device)
    mel = torch.randn(args.batch, bigvgan.config.mel_dim, args.frames, generator=torch.Generator().manual_seed(0))
    mel = mel.to(args.device)
    variants = {
        "transformers": None,
        "compiled, one function": torch.compile(activations.anti_aliased_activation, dynamic=True),
        "compiled, two kernels": activations._compiled(),
    }
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    audio = {}
    with torch.no_grad():
        for round_index in range(args.rounds):
            for name, function in variants.items():
                install(bigvgan, function)
                if args.device.startswith("cuda"):
                    torch.cuda.synchronize()
                began = time.perf_counter()
                audio[name] = bigvgan(mel)
                if args.device.startswith("cuda"):
                    torch.cuda.synchronize()
                if round_index:
                    seconds[name].append(time.perf_counter() - began)
    print(f"BigVGAN, {args.batch} mels of {args.frames} frames, {args.device}, float32, {args.rounds - 1} rounds")
    for name, times in seconds.items():
        difference = float((audio[name] - audio["transformers"]).abs().max())
        print(f"  {name:24s} median {statistics.median(times) * 1e3:9.1f} ms  max |diff| {difference:.1e}")


if __name__ == "__main__":
    main()
