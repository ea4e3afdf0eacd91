"""Sampling parameters from an OpenAI request: the standard fields set the entry stage's,
`sampling_params_list` (one dict per stage, in stage order) sets each stage's explicitly, both
over the stage's defaults (the pipeline's, then the deployment's per-stage `sampling`).

AR stages take `stages.protocol.SamplingParams`; a diffusion stage's dict (steps, guidance,
size...) goes into the request params instead, which every stage sees.
"""

from __future__ import annotations

from typing import Any

import msgspec

from control_plane.inference.errors import ApiError
from stages.config import DeployConfig, PipelineConfig
from stages.errors import InvalidRequest
from stages.protocol import SamplingParams

DEFAULT_MAX_TOKENS = 512
OPENAI_SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "seed", "max_tokens", "min_tokens", "stop",
                          "stop_token_ids", "ignore_eos")  # fmt: skip


def sampling_for_stage(defaults: dict[str, Any], overrides: dict[str, Any], param: str) -> SamplingParams:
    merged = {**defaults, **{k: v for k, v in overrides.items() if v is not None}}
    if isinstance(merged.get("stop"), str):
        merged["stop"] = [merged["stop"]]
    try:
        sampling = msgspec.convert(merged, SamplingParams, strict=False)
        sampling.validate()
    except msgspec.ValidationError as error:
        text = str(error)
        field = text.rsplit("`$.", 1)[1].rstrip("`") if "`$." in text else None
        if "unknown field `" in text:
            field = text.split("unknown field `", 1)[1].split("`", 1)[0]
        where = _join(param, field)
        raise ApiError(400, f"Invalid value for '{where}': {text.split(' - at ')[0]}.", param=where) from None
    except InvalidRequest as error:
        where = _join(param, error.param)
        raise ApiError(400, f"Invalid value for '{where}': {error.message}.", param=where) from None
    return sampling


def build_sampling(
    pipeline: PipelineConfig, deploy: DeployConfig, fields: dict[str, Any], per_stage: list[Any] | None
) -> tuple[SamplingParams | None, dict[str, SamplingParams], dict[str, Any]]:
    """(entry sampling, later stages' sampling by name, extra request params)."""
    stages = sorted(pipeline.stages, key=lambda stage: stage.id)
    entry = pipeline.entry_stage
    extra_params: dict[str, Any] = {}
    later: dict[str, SamplingParams] = {}
    entry_overrides = {key: fields.get(key) for key in OPENAI_SAMPLING_FIELDS}
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
                extra_params.update(params)
            elif stage.id == entry.id:
                entry_overrides = {**entry_overrides, **params}
            else:
                later[stage.name] = sampling_for_stage(deploy.default_sampling(stage), params, param)
    entry_sampling = None
    if entry.kind != "diffusion":
        defaults = deploy.default_sampling(entry)
        if entry_overrides.get("max_tokens") is None and "max_tokens" not in defaults:
            entry_overrides["max_tokens"] = DEFAULT_MAX_TOKENS
        entry_sampling = sampling_for_stage(defaults, entry_overrides, _entry_param(per_stage))
    return entry_sampling, later, extra_params


def _entry_param(per_stage) -> str:
    return "sampling_params_list[0]" if per_stage else ""


def _join(param: str, field: str | None) -> str:
    if param and field:
        return f"{param}.{field}"
    return field or param or "sampling"
