"""Per-request sampling: repetition penalty, suppressed tokens, temperature, top-k, top-p, seeds.

Order as in transformers' `generate()`: repetition penalty over the sequence's tokens so far
(prompt and output), suppressed tokens (and EOS / stop ids before `min_tokens`), then for sampled
rows temperature, top-k, top-p and a draw. Each seeded request owns a `torch.Generator`, so its
samples do not depend on which other requests share the batch. Filtering runs batched with
per-row parameters; the draw is per row (one generator each). Greedy rows take one batched argmax.
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
        logits = self._penalize_repetitions(logits, seqs)
        logits = self._suppress(logits, seqs)
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
        draws = [
            torch.multinomial(row_probs, 1, generator=seqs[row].generator)
            for row, row_probs in zip(sampled_rows, probs, strict=True)
        ]  # left on the device: one copy to the host for the whole batch, not one per row
        for row, token in zip(sampled_rows, torch.cat(draws).tolist(), strict=True):
            tokens[row] = token
        return tokens

    def _penalize_repetitions(self, logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
        """transformers' RepetitionPenaltyLogitsProcessor (and vLLM's): a seen token's logit is divided
        by the penalty when positive, multiplied when negative."""
        rows = [row for row, seq in enumerate(seqs) if (seq.sampling.repetition_penalty or 1.0) != 1.0]
        if not rows:
            return logits
        seen = self._seen_tokens([seqs[row] for row in rows], logits.shape[-1])
        penalty = torch.tensor([seqs[row].sampling.repetition_penalty for row in rows], device=logits.device)
        picked = logits[rows].float()
        penalty = penalty.unsqueeze(1)
        penalized = torch.where(picked > 0, picked / penalty, picked * penalty)
        logits = logits.float() if logits.dtype != torch.float32 else logits
        logits[rows] = torch.where(seen, penalized, picked)
        return logits

    def _seen_tokens(self, seqs: list[Sequence], vocab: int) -> torch.Tensor:
        """[rows, vocab] bool of the tokens in each sequence. Each sequence keeps its row on the device
        and it is extended by the tokens added since: all rows' new tokens go to the device in one
        copy (a copy from the host waits for the stream's queued work, so one per row per step would
        stall the step loop once per request)."""
        rows, positions, new_tokens = [], [], []
        for row, seq in enumerate(seqs):
            seen, counted = seq.extra.get("seen_tokens", (None, 0))
            rows.append(torch.zeros(vocab, dtype=torch.bool, device=self.device) if seen is None else seen)
            new = seq.token_ids[counted:]
            positions += [row] * len(new)
            new_tokens += new
        seen = torch.stack(rows)
        if new_tokens:
            index = torch.tensor([positions, new_tokens], dtype=torch.long).to(self.device)
            seen[index[0], index[1]] = True
        for row, seq in enumerate(seqs):
            seq.extra["seen_tokens"] = (seen[row], seq.num_tokens)
        return seen

    def _suppress(self, logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
        """Suppressed ids never, and EOS and the stop ids not before `min_tokens` (logits edited in place).
        Each sequence keeps its banned ids as a [vocab] mask on the device (a talker bans a thousand codes
        at every step): one stack and one masked fill per step."""
        masks = [self._banned_mask(seq, logits.shape[-1]) for seq in seqs]
        if all(mask is None for mask in masks):
            return logits
        allowed = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
        banned = torch.stack([allowed if mask is None else mask for mask in masks])
        return logits.masked_fill_(banned, float("-inf"))

    def _banned_mask(self, seq: Sequence, vocab: int) -> torch.Tensor | None:
        early = seq.num_output_tokens < seq.sampling.min_tokens
        cached = seq.extra.get("banned_mask")
        if cached is None or cached[0] is not seq.suppressed_token_ids or cached[1] != early:
            banned = list(seq.suppressed_token_ids) + (self._banned_early(seq) if early else [])
            mask = None
            if banned:
                mask = torch.zeros(vocab, dtype=torch.bool, device=self.device)
                mask[torch.tensor(banned, dtype=torch.long).to(self.device)] = True
            cached = (seq.suppressed_token_ids, early, mask)
            seq.extra["banned_mask"] = cached
        return cached[2]

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
