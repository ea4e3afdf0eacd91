"""The sampling a realtime response gives each AR stage.

A stage's defaults are the pipeline's, overridden by the deployment's per-stage sampling
(`DeployConfig.stages[name].sampling`, e.g. a talker's max_tokens), then by the session:
a number in `max_output_tokens` bounds every AR stage's output tokens, audio codes included
(as OpenAI counts audio tokens in it); "inf" leaves the stages' own limits. The session's
temperature applies to the entry stage (the thinker) only.
"""

from __future__ import annotations

from typing import Any

import msgspec

from control_plane.realtime.session_config import DEFAULT_MAX_OUTPUT_TOKENS
from stages.config import DeployConfig, PipelineConfig, StageConfig
from stages.protocol import SamplingParams


def stage_defaults(stage: StageConfig, deploy: DeployConfig) -> dict[str, Any]:
    overrides = deploy.stages.get(stage.name)
    return {**stage.default_sampling, **(overrides.sampling if overrides else {})}


def entry_sampling(
    pipeline: PipelineConfig, deploy: DeployConfig, max_output_tokens: int | str, temperature: float | None
) -> SamplingParams | None:
    entry = pipeline.entry_stage
    if entry.kind != "ar":
        return None
    merged = stage_defaults(entry, deploy)
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
            {**stage_defaults(stage, deploy), "max_tokens": max_output_tokens}, SamplingParams, strict=False
        )
        for stage in pipeline.stages
        if stage.kind == "ar" and stage.id != entry_id
    }
