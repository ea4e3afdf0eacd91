"""Which stages a request needs: a request that asks for some output modalities only (a chat with
`modalities: ["text"]`, a transcription) leaves out the stages that lead to none of them (an omni
pipeline's talker and code2wav), so they never see it."""

from __future__ import annotations

from typing import Any

from stages.config import PipelineConfig


def unwanted_stages(pipeline: PipelineConfig, modalities: Any) -> set[int]:
    """Ids of the stages no requested modality needs; none when the request names no modalities
    (or none this pipeline emits)."""
    if not isinstance(modalities, list) or not modalities:
        return set()
    wanted = {stage.id for stage in pipeline.stages if stage.output in modalities}
    if not wanted:
        return set()
    frontier = list(wanted)
    while frontier:
        for edge in pipeline.upstream(frontier.pop()):
            if edge.source not in wanted:
                wanted.add(edge.source)
                frontier.append(edge.source)
    return {stage.id for stage in pipeline.stages} - wanted
