"""A request's state inside the AR engine: its tokens, progress counters, KV blocks and status.

One counter rules scheduling (vLLM's idea): `num_computed_tokens` catches up with `num_tokens`.
A prompt chunk, a decode step and a recompute after preemption are all "compute the tokens not
computed yet". The last known token is computed only when the input is complete, so a request
that waits for input chunks always has a token left to compute once its final chunk arrives.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stages.protocol import SamplingParams

if TYPE_CHECKING:
    import torch

    from stages.ar.detokenizer import IncrementalDetokenizer


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


EMBEDS_PLACEHOLDER_ID = 0
"""Token id stored at prompt positions given as embeddings (never looked up)."""


@dataclass(eq=False)
class Sequence:
    request_id: str
    token_ids: list[int]
    sampling: SamplingParams
    max_length: int
    input_finished: bool = True
    hidden_layers: tuple[int, ...] = ()
    stage_id: int = 0
    num_prompt_tokens: int = 0
    num_computed_tokens: int = 0
    num_hidden_emitted: int = 0
    embeds_segments: list[tuple[int, torch.Tensor]] = field(default_factory=list)
    """(first position, rows [n, hidden]) of prompt positions given as embeddings."""
    block_table: list[int] = field(default_factory=list)
    status: SequenceStatus = SequenceStatus.WAITING
    generator: torch.Generator | None = None
    detokenizer: IncrementalDetokenizer | None = None
    finish_reason: str | None = None
    output_seq: int = 0
    arrival_time: float = field(default_factory=time.monotonic)
    first_token_time: float | None = None
    position_delta: int = 0
    """M-RoPE models: a token at index i past the prompt sits at rotary position i + delta."""
    input_limit: int | None = None
    """Side input not here yet: positions >= this cannot be computed (None: no limit). A talker whose
    next input row comes from an upstream stage raises it as rows arrive."""
    suppressed_token_ids: tuple[int, ...] = ()
    """Never sampled (e.g. a codec's start token)."""
    output_params: dict[str, Any] = field(default_factory=dict)
    """Params attached to this sequence's next output, then cleared (e.g. what a downstream stage needs)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free room for a model adapter's per-request state (e.g. rope tables, upstream hidden states)."""

    def __post_init__(self) -> None:
        self.num_prompt_tokens = len(self.token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return self.num_tokens - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_computable_tokens(self) -> int:
        """Tokens this sequence could compute now (holding back the last one while input may follow)."""
        limit = self.num_tokens if self.input_finished else self.num_tokens - 1
        if self.input_limit is not None:
            limit = min(limit, self.input_limit)
        return max(0, limit - self.num_computed_tokens)

    @property
    def has_embeds(self) -> bool:
        return bool(self.embeds_segments)

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def append_prompt(self, token_ids: list[int], embeds: torch.Tensor | None = None) -> None:
        """Append an input chunk: token ids, or embedding rows. Ids given with the rows stand for them
        (repetition penalty, detokenization); rows alone are stored with placeholder ids."""
        if embeds is not None:
            self.embeds_segments.append((self.num_tokens, embeds))
            if len(token_ids) != int(embeds.shape[0]):
                token_ids = [EMBEDS_PLACEHOLDER_ID] * int(embeds.shape[0])
        self.token_ids.extend(token_ids)
        self.num_prompt_tokens = len(self.token_ids)

    def embeds_rows(self, start: int, end: int) -> list[tuple[int, torch.Tensor]]:
        """(offset from `start`, rows) for the embedding rows that cover positions [start, end)."""
        pieces = []
        for first, rows in self.embeds_segments:
            lo, hi = max(start, first), min(end, first + int(rows.shape[0]))
            if lo < hi:
                pieces.append((lo - start, rows[lo - first : hi - first]))
        return pieces

    def next_output_seq(self) -> int:
        seq = self.output_seq
        self.output_seq += 1
        return seq
