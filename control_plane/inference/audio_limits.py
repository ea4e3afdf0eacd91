"""Every request's audio bounded (stages/audio_cap.py): the talker's `max_tokens` lowered to the
codes of the request's audio cap, whichever interface submits it."""

from __future__ import annotations

import msgspec

from control_plane.inference.errors import ApiError
from control_plane.inference.targets import Served
from stages.audio_cap import CEILING_S, audio_seconds_cap, talker_codes_cap
from stages.config import DeployConfig
from stages.protocol import SamplingParams, StageRequest
from stages.sampling_merge import merge_sampling


def capped_later_sampling(
    served: Served, request: StageRequest, later: dict[str, SamplingParams] | None
) -> dict[str, SamplingParams] | None:
    pipeline, deploy = served.pipeline, served.deploy
    talkers = [stage for stage in pipeline.stages if stage.kind == "ar" and stage.name in served.audio_token_stages]
    if not talkers or request.sampling is None:
        return later
    requested = request.options.max_audio_seconds  # checked at the edge (max_audio_seconds below)
    seconds = audio_seconds_cap(request.sampling.max_tokens, requested=requested, ceiling=deploy.max_audio_seconds)
    codes = talker_codes_cap(pipeline.family, seconds)
    if codes is None:
        return later
    capped = dict(later or {})
    for stage in talkers:
        sampling = capped.get(stage.name) or merge_sampling(stage.default_sampling, deploy.sampling_override(stage))
        if sampling.max_tokens > codes:
            capped[stage.name] = msgspec.structs.replace(sampling, max_tokens=codes)
    return capped


def max_audio_seconds(value: float, deploy: DeployConfig, param: str = "max_audio_seconds") -> float:
    """A request's `max_audio_seconds`, checked against the deployment's ceiling."""
    ceiling = deploy.max_audio_seconds or CEILING_S
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= ceiling:
        raise ApiError.invalid(param, f"Invalid '{param}': expected a number of seconds in (0, {ceiling:g}].")
    return float(value)
