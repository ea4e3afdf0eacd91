"""Next-token choice for the omni AR stages, with transformers' logits-processor semantics.

Order as in `generate()`: repetition penalty (over `history`), suppressed tokens, then for
sampling temperature, top-k, top-p and a draw from the request's own generator. Greedy
(`temperature == 0` or `top_k == 1`) is the argmax after penalty and suppression, which is
what `generate(do_sample=False, repetition_penalty=...)` does.
"""

from __future__ import annotations

from typing import Any

from stages.protocol import SamplingParams


def choose_token(
    logits: Any,
    sampling: SamplingParams,
    generator: Any,
    *,
    history: list[int] | None = None,
    repetition_penalty: float = 1.0,
    suppress: Any = None,
) -> int:
    """`logits`: a float32 vector over the vocabulary. Returns the chosen id."""
    import torch

    scores = logits.float().clone()
    if repetition_penalty != 1.0 and history:
        index = torch.tensor(sorted(set(history)), dtype=torch.long, device=scores.device)
        picked = scores.gather(0, index)
        picked = torch.where(picked < 0, picked * repetition_penalty, picked / repetition_penalty)
        scores.scatter_(0, index, picked)
    if suppress is not None:
        scores[suppress] = -float("inf")
    if sampling.greedy:
        return int(torch.argmax(scores))
    scores = scores / sampling.temperature
    if sampling.top_k > 0:
        kth = torch.topk(scores, min(sampling.top_k, scores.numel())).values[-1]
        scores = scores.masked_fill(scores < kth, -float("inf"))
    if sampling.top_p < 1.0:
        ordered, order = torch.sort(scores, descending=False)
        cumulative = ordered.softmax(-1).cumsum(-1)
        drop = cumulative <= 1 - sampling.top_p
        drop[-1] = False
        scores = scores.masked_fill(drop.scatter(0, order, drop), -float("inf"))
    probs = scores.softmax(-1)
    return int(torch.multinomial(probs, 1, generator=generator))


def make_generator(seed: int | None, device: str = "cpu"):
    import torch

    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    return generator
