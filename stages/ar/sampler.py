"""Per-request sampling: temperature, top-k, top-p, seeds, min_tokens; greedy rows batched.

Each seeded request owns a `torch.Generator`, so its samples do not depend on which other
requests share the batch. Filtering runs batched with per-row parameters; the draw is per row
(one generator each). Greedy rows take one batched argmax.
"""

from __future__ import annotations

import torch

from stages.ar.sequence import Sequence


class Sampler:
    def __init__(self, eos_token_ids: set[int], device: torch.device):
        self.eos_token_ids = eos_token_ids
        self.device = device

    @torch.inference_mode()
    def __call__(self, logits: torch.Tensor, seqs: list[Sequence]) -> list[int]:
        logits = self._suppress_early_stops(logits, seqs)
        greedy = [seq.sampling.greedy for seq in seqs]
        if all(greedy):
            return logits.argmax(dim=-1).tolist()
        tokens = [0] * len(seqs)
        greedy_rows = [row for row, is_greedy in enumerate(greedy) if is_greedy]
        if greedy_rows:
            for row, token in zip(greedy_rows, logits[greedy_rows].argmax(dim=-1).tolist(), strict=True):
                tokens[row] = token
        sampled_rows = [row for row, is_greedy in enumerate(greedy) if not is_greedy]
        probs = self._filtered_probs(logits[sampled_rows].float(), [seqs[row] for row in sampled_rows])
        for row, row_probs in zip(sampled_rows, probs, strict=True):
            tokens[row] = int(torch.multinomial(row_probs, 1, generator=seqs[row].generator))
        return tokens

    def _suppress_early_stops(self, logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
        """Before `min_tokens`, EOS and the stop token ids cannot be sampled (logits edited in place)."""
        rows, columns = [], []
        for row, seq in enumerate(seqs):
            if seq.num_output_tokens < seq.sampling.min_tokens:
                for token in self._banned_early(seq):
                    rows.append(row)
                    columns.append(token)
        if rows:
            device = logits.device
            logits[torch.tensor(rows, device=device), torch.tensor(columns, device=device)] = float("-inf")
        return logits

    def _banned_early(self, seq: Sequence) -> list[int]:
        if "banned_early" not in seq.extra:
            params = seq.sampling
            banned = set(params.stop_token_ids) | (set() if params.ignore_eos else self.eos_token_ids)
            seq.extra["banned_early"] = sorted(banned)
        return seq.extra["banned_early"]

    def _filtered_probs(self, logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
        temperature = torch.tensor([s.sampling.temperature for s in seqs], device=logits.device)
        logits = logits / temperature.unsqueeze(1)
        top_k = [s.sampling.top_k for s in seqs]
        if any(top_k):
            vocab = logits.shape[-1]
            k = torch.tensor([min(k, vocab) if k > 0 else vocab for k in top_k], device=logits.device)
            sorted_logits = logits.sort(dim=-1, descending=True).values
            kth = sorted_logits.gather(1, (k - 1).unsqueeze(1))
            logits = logits.masked_fill(logits < kth, float("-inf"))
        top_p = [s.sampling.top_p for s in seqs]
        if any(p < 1 for p in top_p):
            top_p_tensor = torch.tensor(top_p, device=logits.device)
            sorted_logits, order = logits.sort(dim=-1, descending=True)
            sorted_probs = sorted_logits.softmax(dim=-1)
            mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
            drop_sorted = mass_before > top_p_tensor.unsqueeze(1)
            drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
            logits = logits.masked_fill(drop, float("-inf"))
        return logits.softmax(dim=-1)
