"""Validation of what a StageRequest asks of the AR engine; every error names its field."""

from __future__ import annotations

from typing import Any

from stages.errors import InvalidRequest
from stages.protocol import SamplingParams, StageRequest
from stages.sampling_merge import merge_sampling


def parse_sampling(request: StageRequest, defaults: dict[str, Any] | None = None) -> SamplingParams:
    """The request's `sampling`, validated; the stage's defaults (its deployment's `sampling`)
    when the request carries none."""
    sampling = request.sampling if request.sampling is not None else merge_sampling(deployment=defaults)
    sampling.validate()
    return sampling


def parse_hidden_layers(value: Any, num_layers: int) -> tuple[int, ...]:
    """Indices into transformers' `hidden_states` tuple (0: embeddings, -1: last); num_layers + 1 entries."""
    if value is None:
        return ()
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list | tuple) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise InvalidRequest("hidden_layers", f"expected a list of layer indices, got {value!r}")
    count = num_layers + 1
    for layer in value:
        if not -count <= layer < count:
            raise InvalidRequest("hidden_layers", f"layer {layer} is out of range for {count} hidden states")
    return tuple(value)


def check_token_ids(token_ids: list[int], vocab_size: int, field: str) -> None:
    for token_id in token_ids:
        if not isinstance(token_id, int) or not 0 <= token_id < vocab_size:
            raise InvalidRequest(field, f"token id {token_id!r} is outside the vocabulary [0, {vocab_size})")
