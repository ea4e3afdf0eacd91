"""A stage's sampling, merged once: the pipeline's default, then the deployment's per-stage
override (`DeployConfig.stages[name].sampling`), then the request's fields, validated once.

Every interface (the OpenAI routes, realtime, the console, the offline API) and the
orchestrator core build an AR stage's `SamplingParams` here, so precedence, the default
`max_tokens` (`stages.protocol.DEFAULT_MAX_TOKENS`) and the errors are the same everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from stages.layered_fields import checked, merged_layers
from stages.protocol import SamplingParams

SAMPLING_FIELDS: tuple[str, ...] = tuple(field.name for field in msgspec.structs.fields(SamplingParams))
"""The sampling fields a request may set, as `SamplingParams` spells them."""


def merge_sampling(
    pipeline: Mapping[str, Any] | None = None,
    deployment: Mapping[str, Any] | None = None,
    request: Mapping[str, Any] | None = None,
    *,
    param: str = "",
) -> SamplingParams:
    """The stage's `SamplingParams`: each layer's fields over the one before (a None value is
    not set). A string `stop` is one stop string. Raises InvalidRequest whose `param` names the
    offending field under `param` (`sampling_params_list[1].top_p`; `top_p` with no `param`) and
    whose `reason` says what is wrong with it."""
    merged = merged_layers((pipeline, deployment, request), param=param, what="sampling")
    if isinstance(merged.get("stop"), str):
        merged["stop"] = [merged["stop"]]
    return checked(SamplingParams, merged, param=param, what="sampling")
