"""The sampling a realtime response gives each AR stage.

A stage's defaults are the pipeline's, overridden by the deployment's per-stage sampling
(`DeployConfig.stages[name].sampling`, e.g. a talker's max_tokens), then by the session:
a number in `max_output_tokens` bounds every AR stage's output tokens, audio codes included
(as OpenAI counts audio tokens in it); "inf" leaves the stages' own limits. The session's
temperature applies to the entry stage (the thinker) only. One merge does it
(`stages.sampling_merge.merge_sampling`).
"""

from __future__ import annotations

from stages.config import DeployConfig, PipelineConfig
from stages.protocol import SamplingParams
from stages.sampling_merge import merge_sampling


def entry_sampling(
    pipeline: PipelineConfig, deploy: DeployConfig, max_output_tokens: int | str, temperature: float | None
) -> SamplingParams | None:
    entry = pipeline.entry_stage
    if entry.kind != "ar":
        return None
    session = {"max_tokens": _bound(max_output_tokens), "temperature": temperature}
    return merge_sampling(entry.default_sampling, deploy.sampling_override(entry), session)


def later_sampling(
    pipeline: PipelineConfig, deploy: DeployConfig, max_output_tokens: int | str
) -> dict[str, SamplingParams]:
    """Sampling of the AR stages after the entry; empty with "inf", where the orchestrator
    gives each stage its defaults (the deployment's overrides included) itself."""
    if max_output_tokens == "inf":
        return {}
    entry_id = pipeline.entry_stage.id
    return {
        stage.name: merge_sampling(
            stage.default_sampling, deploy.sampling_override(stage), {"max_tokens": max_output_tokens}
        )
        for stage in pipeline.stages
        if stage.kind == "ar" and stage.id != entry_id
    }


def _bound(max_output_tokens: int | str) -> int | None:
    """The session's bound on output tokens; None for "inf" (the stage's own limit)."""
    return None if max_output_tokens == "inf" else int(max_output_tokens)
