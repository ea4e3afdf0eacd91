"""What the OpenAI-compatible app offers other apps: a request checked and completed the way
/v1/chat/completions does it (the console's playgrounds send the same requests from forms)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from control_plane.inference.targets import Served
from control_plane.openai_compat.chat import check_modalities
from control_plane.openai_compat.chat_inputs import prepare_messages, summarize
from control_plane.openai_compat.sampling import build_sampling
from stages.protocol import SamplingParams, StageRequest


@dataclass
class Prepared:
    later_sampling: dict[str, SamplingParams]
    """The sampling of the stages after the entry (the entry's is on the request)."""
    messages_summary: list[dict[str, Any]] | None
    """The messages without their media bytes, for the history row."""
    modalities: list[str] | None
    """The output modalities asked for, checked (None when none were asked)."""


async def request_prepare(
    served: Served, request: StageRequest, *, sampling: dict[str, Any], modalities: list[str] | None = None
) -> Prepared:
    """Complete `request` for `served` in place: output modalities checked against the pipeline's
    (`options.modalities`), media in its messages fetched and decoded, sampling merged over the
    pipeline's and the deployment's defaults. Raises ApiError naming the field at fault."""
    if modalities is not None:
        modalities = request.options.modalities = check_modalities(modalities, served.output_modalities)
    summary = None
    if request.messages:
        request.messages = await prepare_messages(request.messages)
        summary = summarize(request.messages)
    entry, later, _ = build_sampling(served.pipeline, served.deploy, sampling, None)
    if entry is not None:
        request.sampling = entry
    return Prepared(later_sampling=later, messages_summary=summary, modalities=modalities)
