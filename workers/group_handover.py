"""Hands a request's outputs from one stage of a group to the next, in memory.

What the orchestrator core does along an edge (`stages.orchestrator.core._forward`), done
inside the group's host for the edges inside the group: a streaming edge passes each output
on as it comes, a non-streaming one all of them once the source finished; the receiving
stage's input is numbered by its own seq and `finished` once every source finished. Tensors
stay the objects the source engine made (on its device): nothing is encoded or copied.

It also says what leaves the group (`stages.groups`): a client-visible member's outputs carry
only their client modality's payloads, a member with an edge out of the group keeps them all,
an inner member sends nothing. Errors always leave.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from stages.config import PipelineConfig
from stages.groups import StageGroup
from stages.orchestrator.forwarding import build_stage_request, has_content
from stages.orchestrator.wanted import unwanted_stages
from stages.protocol import RequestOptions, SamplingParams, StageOutput, StageRequest


@dataclass
class _Receiver:
    sent_seq: int = 0
    sources_finished: set[int] = field(default_factory=set)
    held: dict[int, list[StageOutput]] = field(default_factory=dict)


@dataclass
class _Request:
    base_params: dict[str, Any]
    options: RequestOptions
    sampling: dict[str, SamplingParams]
    pending: set[int]
    """Members that still owe outputs (those the request needs)."""
    receivers: dict[int, _Receiver] = field(default_factory=dict)


@dataclass
class Handover:
    """What one output leads to: inputs for other members, and what leaves the group."""

    inputs: list[StageRequest] = field(default_factory=list)
    leaving: StageOutput | None = None


class GroupHandover:
    def __init__(self, pipeline: PipelineConfig, group: StageGroup):
        self.pipeline = pipeline
        self.group = group
        self.requests: dict[str, _Request] = {}
        self._inner_edges = {
            member: [edge for edge in pipeline.downstream(member) if edge.target in group] for member in group.members
        }
        self._upstream = {member: {edge.source for edge in pipeline.upstream(member)} for member in group.members}

    def admit(self, request: StageRequest) -> None:
        """A request entering the group (its entry stage's seq 0)."""
        unwanted = unwanted_stages(self.pipeline, request.options.modalities)
        self.requests[request.request_id] = _Request(
            base_params=request.params,
            options=request.options,
            sampling=dict(request.group_sampling),
            pending={member for member in self.group.members if member not in unwanted},
        )

    def route(self, output: StageOutput) -> Handover:
        request = self.requests.get(output.request_id)
        if request is None:
            return Handover()  # aborted or failed meanwhile
        if output.error is not None:
            self.forget(output.request_id)
            return Handover(leaving=output)
        handover = Handover(leaving=self._leaving(output))
        for edge in self._inner_edges[output.stage_id]:
            if edge.target in request.pending:
                handover.inputs += self._forward(request, output, edge.target, edge.streaming)
        if output.finished:
            request.pending.discard(output.stage_id)
        return handover

    def done(self, request_id: str) -> bool:
        """Whether every member the request needs finished (or it was never admitted)."""
        request = self.requests.get(request_id)
        return request is None or not request.pending

    def forget(self, request_id: str) -> None:
        self.requests.pop(request_id, None)

    def _leaving(self, output: StageOutput) -> StageOutput | None:
        stage_id = output.stage_id
        if stage_id not in self.group.published:
            return None
        if stage_id in self.group.leaving:
            return output
        modality = self.pipeline.stage(stage_id).output
        payloads = {key: value for key, value in output.payloads.items() if key.split("#")[0] == modality}
        if len(payloads) == len(output.payloads):
            return output
        return msgspec.structs.replace(output, payloads=payloads)

    def _forward(self, request: _Request, output: StageOutput, target: int, streaming: bool) -> list[StageRequest]:
        receiver = request.receivers.setdefault(target, _Receiver())
        if output.finished:
            receiver.sources_finished.add(output.stage_id)
        if streaming:
            if not has_content(output) and not output.finished:
                return []
            batch = [output]
        else:
            receiver.held.setdefault(output.stage_id, []).append(output)
            if not output.finished:
                return []
            batch = receiver.held.pop(output.stage_id)
        stage_input = build_stage_request(
            wire_id=output.request_id,
            source_stage=output.stage_id,
            target_stage=target,
            seq=receiver.sent_seq,
            finished=self._upstream[target] <= receiver.sources_finished,
            outputs=batch,
            sampling=request.sampling.get(self.pipeline.stage(target).name),
            base_params=request.base_params,
            options=request.options,
            at=time.time(),
        )
        receiver.sent_seq += 1
        return [stage_input]
