"""M-RoPE positions for packed batches (Qwen-Omni thinkers and talkers).

A sequence whose prompt positions are not plain indices keeps its rotary table in
`seq.extra["rope"]` ([3, prompt]: temporal, height and width rows) and the offset of the tokens
after it in `seq.position_delta` (the runner already adds it). A packed batch that holds a prompt
chunk of such a sequence gets [3, 1, T] positions with the table's values on that chunk's rows;
any other batch keeps the runner's [1, T] positions, which the model broadcasts to three rows.
"""

from __future__ import annotations

import torch

from stages.ar.model_adapter import ModelInputs


def rope_position_ids(inputs: ModelInputs) -> torch.Tensor:
    if not any(_has_table_rows(seq, start) for seq, start, _ in inputs.sequences):
        return inputs.position_ids
    positions = inputs.position_ids.expand(3, -1).clone()
    row = 0
    for seq, start, count in inputs.sequences:
        if _has_table_rows(seq, start):
            table = seq.extra["rope"]
            end = min(start + count, table.shape[1])
            positions[:, row : row + end - start] = table[:, start:end].to(positions.device)
        row += count
    return positions.unsqueeze(1)


def has_rope_table(seq) -> bool:
    """Whether the sequence's prompt positions come from a rotary table rather than its indices."""
    return seq.extra.get("rope") is not None


def _has_table_rows(seq, start: int) -> bool:
    return has_rope_table(seq) and start < seq.extra["rope"].shape[1]
