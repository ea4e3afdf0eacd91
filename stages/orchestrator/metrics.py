"""Request timings from the timestamps the core recorded (seconds).

Queue: submit -> the request's first stage placed on a replica (the orchestrator's wait for
one; its wait in the replica's input stream is the replica's `omnistage_stage_queue_seconds`).
TTFT: submit -> first client-visible text. TPOT: mean gap between text tokens after the
first. TTFP: submit -> first audio packet. E2EL: submit -> completion. RTF: E2EL over the
seconds of audio produced. Per stage: when it started (after submission), time from its first
input to its finish and to its first output, how many outputs with content it sent, and when some
of them came (the request's timeline in the console draws them).
"""

from __future__ import annotations

from stages.orchestrator.actions import RequestSummary
from stages.orchestrator.state import RequestState


def summarize(state: RequestState, ended_at: float) -> RequestSummary:
    metrics: dict[str, float] = {"e2el_s": ended_at - state.submitted_at}
    placed = [progress.started_at for progress in state.stages.values() if progress.started_at is not None]
    if placed:
        metrics["queue_s"] = max(0.0, min(placed) - state.submitted_at)
    if state.first_text_at is not None:
        metrics["ttft_s"] = state.first_text_at - state.submitted_at
        gaps = max(state.text_tokens, state.text_outputs) - 1
        if gaps > 0 and state.last_text_at is not None:
            metrics["tpot_s"] = (state.last_text_at - state.first_text_at) / gaps
    if state.first_audio_at is not None:
        metrics["ttfp_s"] = state.first_audio_at - state.submitted_at
    if state.audio_seconds > 0:
        metrics["audio_s"] = state.audio_seconds
        metrics["rtf"] = metrics["e2el_s"] / state.audio_seconds
    usage: dict[str, int] = {}
    if state.prompt_tokens is not None:
        usage["prompt_tokens"] = state.prompt_tokens
    elif state.entry.prompt_token_ids is not None:
        usage["prompt_tokens"] = len(state.entry.prompt_token_ids)
    if state.text_tokens:
        usage["completion_tokens"] = state.text_tokens
    marks: dict[str, list[float]] = {}
    for progress in state.stages.values():
        prefix = f"stage.{progress.name}"
        if progress.started_at is not None:
            metrics[f"{prefix}.started_s"] = progress.started_at - state.submitted_at
            metrics[f"{prefix}.duration_s"] = (progress.finished_at or ended_at) - progress.started_at
            metrics[f"{prefix}.outputs"] = float(progress.outputs)
            if progress.first_output_at is not None:
                metrics[f"{prefix}.first_output_s"] = progress.first_output_at - progress.started_at
            if progress.output_marks:
                marks[progress.name] = list(progress.output_marks)
        usage[f"{prefix}.output_tokens"] = progress.output_tokens
    return RequestSummary(
        finish_reason=state.finish_reason, metrics=metrics, usage=usage, attempts=state.attempt + 1, output_marks=marks
    )
