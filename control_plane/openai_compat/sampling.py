"""Sampling parameters from an OpenAI request: the standard fields set the entry stage's,
`sampling_params_list` (one dict per stage, in stage order) sets each stage's explicitly, both
over the stage's defaults (the pipeline's, then the deployment's per-stage `sampling`), merged
by `stages.sampling_merge.merge_sampling`.

AR stages take `stages.protocol.SamplingParams`; a diffusion stage's dict (steps, guidance,
size...) sets the request's diffusion knobs instead (`RequestOptions.diffusion`, which every stage
sees), checked the same way (`sampling_params_list[2].seed`).
"""

from __future__ import annotations

from typing import Any

from control_plane.inference.errors import ApiError
from control_plane.openai_compat.knobs import request_knobs
from stages.config import DeployConfig, PipelineConfig, StageConfig
from stages.diffusion_knobs import DiffusionKnobs
from stages.errors import InvalidRequest
from stages.protocol import SamplingParams
from stages.sampling_merge import SAMPLING_FIELDS, merge_sampling


def sampling_for_stage(stage: StageConfig, deploy: DeployConfig, fields: dict[str, Any], param: str) -> SamplingParams:
    """The stage's sampling with the request's `fields` over its defaults; a 400 naming the field."""
    try:
        return merge_sampling(stage.default_sampling, deploy.sampling_override(stage), fields, param=param)
    except InvalidRequest as error:
        raise ApiError(400, f"Invalid value for '{error.param}': {error.reason}.", param=error.param) from None


def build_sampling(
    pipeline: PipelineConfig, deploy: DeployConfig, fields: dict[str, Any], per_stage: list[Any] | None
) -> tuple[SamplingParams | None, dict[str, SamplingParams], DiffusionKnobs]:
    """(entry sampling, later stages' sampling by name, the diffusion stages' knobs)."""
    stages = sorted(pipeline.stages, key=lambda stage: stage.id)
    entry = pipeline.entry_stage
    knobs = DiffusionKnobs()
    later: dict[str, SamplingParams] = {}
    entry_fields = {key: fields.get(key) for key in SAMPLING_FIELDS}
    if per_stage is not None:
        if not isinstance(per_stage, list) or len(per_stage) > len(stages):
            raise ApiError(
                400,
                f"'sampling_params_list' must be a list of at most {len(stages)} objects (one per stage: "
                f"{', '.join(stage.name for stage in stages)}).",
                param="sampling_params_list",
            )
        for index, (stage, params) in enumerate(zip(stages, per_stage, strict=False)):
            param = f"sampling_params_list[{index}]"
            if params is None:
                continue
            if not isinstance(params, dict):
                raise ApiError(400, f"'{param}' must be an object.", param=param)
            if stage.kind == "diffusion":
                knobs = request_knobs(knobs.fields(), params, param=param)
            elif stage.id == entry.id:
                entry_fields = {**entry_fields, **params}
            else:
                later[stage.name] = sampling_for_stage(stage, deploy, params, param)
    entry_sampling = None
    if entry.kind != "diffusion":
        entry_sampling = sampling_for_stage(entry, deploy, entry_fields, "sampling_params_list[0]" if per_stage else "")
    return entry_sampling, later, knobs
