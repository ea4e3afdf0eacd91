"""A pipeline's config history: a row for each version `sync_pipelines` (or the admin) wrote."""

from __future__ import annotations

from control_plane.deployments.config_diff import config_diff
from control_plane.deployments.models import Pipeline, PipelineRevision


def pipeline_revision_record(pipeline: Pipeline, previous: dict | None, *, source: str, user=None) -> PipelineRevision:
    """Record the pipeline's current config as revision `pipeline.version`, with its diff from `previous`."""
    revision, _ = PipelineRevision.objects.update_or_create(
        pipeline=pipeline,
        number=pipeline.version,
        defaults={
            "config": pipeline.config,
            "diff": config_diff(previous, pipeline.config) if previous is not None else [],
            "source": source,
            "created_by": user,
        },
    )
    return revision
