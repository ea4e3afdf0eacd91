"""The sampling a realtime response gives each AR stage.

A stage's defaults are the pipeline's, overridden by the deployment's per-stage sampling
(`DeployConfig.stages[name].sampling`, e.g. a talker's max_tokens), then by the session:
a number in `max_output_tokens` bounds every AR stage's output tokens, audio codes included
(as OpenAI counts audio tokens in it); "inf" leaves the stages' own limits. The session's
temperature applies to the entry stage (the thinker) only.
"""

from __future__ import annotations

import msgspec

from control_plane.realtime.session_config import DEFAULT_MAX_OUTPUT_TOKENS
from stages.config import DeployConfig, PipelineConfig
from stages.protocol import SamplingParams


def entry_sampling(
    pipeline: PipelineConfig, deploy: DeployConfig, max_output_tokens: int | str, temperature: float | None
) -> SamplingParams | None:
    entry = pipeline.entry_stage
    if entry.kind != "ar":
        return None
    merged = deploy.default_sampling(entry)
    if max_output_tokens != "inf":
        merged["max_tokens"] = max_output_tokens
    merged.setdefault("max_tokens", DEFAULT_MAX_OUTPUT_TOKENS)
    if temperature is not None:
        merged["temperature"] = temperature
    return msgspec.convert(merged, SamplingParams, strict=False)


def later_sampling(
    pipeline: PipelineConfig, deploy: DeployConfig, max_output_tokens: int | str
) -> dict[str, SamplingParams]:
    """Sampling of the AR stages after the entry; empty with "inf", where the orchestrator
    gives each stage its defaults (the deployment's overrides included) itself."""
    if max_output_tokens == "inf":
        return {}
    entry_id = pipeline.entry_stage.id
    return {
        stage.name: msgspec.convert(
            {**deploy.default_sampling(stage), "max_tokens": max_output_tokens}, SamplingParams, strict=False
        )
        for stage in pipeline.stages
        if stage.kind == "ar" and stage.id != entry_id
    }
