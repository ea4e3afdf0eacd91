"""Turning a stage's outputs into the next stage's input.

The receiving stage gets the same request (wire) id, its own stage id and seq, text in
`prompt`, token ids in `prompt_token_ids`, payloads, params and the request's options carried
through, and
`finished` once every upstream stage finished. The receiving engine's input processor
interprets them (DESIGN.md: input processors run on the receiving host).
A non-streaming edge delivers all of the source's outputs at once, concatenated.
"""

from __future__ import annotations

from typing import Any

from stages.protocol import RequestOptions, SamplingParams, StageOutput, StageRequest, Tensor


def has_content(output: StageOutput) -> bool:
    return bool(output.text or output.token_ids or output.payloads)


def build_stage_request(
    *,
    wire_id: str,
    source_stage: int,
    target_stage: int,
    seq: int,
    finished: bool,
    outputs: list[StageOutput],
    sampling: SamplingParams | None,
    base_params: dict[str, Any],
    at: float,
    trace: str = "",
    options: RequestOptions | None = None,
) -> StageRequest:
    params: dict[str, Any] = dict(base_params) if seq == 0 else {}
    for output in outputs:
        params.update(output.params)
    params["source_stage"] = source_stage
    last = outputs[-1] if outputs else None
    if last is not None and last.finish_reason:
        params["source_finish_reason"] = last.finish_reason
    return StageRequest(
        request_id=wire_id,
        stage_id=target_stage,
        seq=seq,
        finished=finished,
        prompt="".join(output.text for output in outputs),
        prompt_token_ids=[token for output in outputs for token in output.token_ids],
        payloads=concat_payloads([output.payloads for output in outputs]),
        sampling=sampling if seq == 0 else None,
        options=(options or RequestOptions()) if seq == 0 else RequestOptions(),
        params=params,
        arrival_time=at,
        trace=trace,
    )


def concat_payloads(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge per-output payloads: inline tensors of one key join along the first axis;
    keys that cannot be joined (connector handles, mismatched shapes) become `key#i`."""
    by_key: dict[str, list[Any]] = {}
    for payloads in parts:
        for key, value in payloads.items():
            by_key.setdefault(key, []).append(value)
    merged: dict[str, Any] = {}
    for key, values in by_key.items():
        if len(values) == 1:
            merged[key] = values[0]
        elif _joinable(values):
            merged[key] = _join(values)
        else:
            merged.update({f"{key}#{index}": value for index, value in enumerate(values)})
    return merged


def _joinable(values: list[Any]) -> bool:
    if not all(isinstance(value, Tensor) and value.shape for value in values):
        return False
    first = values[0]
    return all(value.dtype == first.dtype and value.shape[1:] == first.shape[1:] for value in values)


def _join(values: list[Tensor]) -> Tensor:
    rows = sum(value.shape[0] for value in values)
    return Tensor(dtype=values[0].dtype, shape=[rows, *values[0].shape[1:]], data=b"".join(v.data for v in values))


def client_view(output: StageOutput, request_id: str, modality: str) -> StageOutput:
    """The output as the client sees it: its own request id, only the payloads of the
    stage's client-visible modality (hidden states for the next stage stay inside)."""
    payloads = {key: value for key, value in output.payloads.items() if key.split("#")[0] == modality}
    return StageOutput(
        request_id=request_id,
        stage_id=output.stage_id,
        seq=output.seq,
        finished=output.finished,
        finish_reason=output.finish_reason,
        modality=output.modality,
        text=output.text,
        token_ids=output.token_ids,
        payloads=payloads,
        params=output.params,
        error=output.error,
        metrics=output.metrics,
    )
