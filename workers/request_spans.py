"""A replica host's spans (stages.tracing): one per request it ran, `stage <name>`, from taking
the request to its last output (or its abort or failure), under the orchestrator's span that the
request's first input carried. Nothing is kept when tracing is off."""

from __future__ import annotations

import time
from dataclasses import dataclass

from stages import tracing
from stages.protocol import ReplicaSpec, StageOutput, StageRequest


@dataclass
class _Open:
    parent: str
    started: float
    first_output: float | None = None
    outputs: int = 0


class RequestSpans:
    def __init__(self, spec: ReplicaSpec, host: str):
        self.spec = spec
        self.host = host
        self.on = tracing.enabled()
        self.open: dict[str, _Open] = {}

    def started(self, request: StageRequest) -> None:
        if self.on and request.trace:
            self.open[request.request_id] = _Open(parent=request.trace, started=time.time())

    def output(self, output: StageOutput, *, ended: bool) -> None:
        """An output of a request; `ended`: the host is done with the request (its last output,
        or a stage group's last member's)."""
        span = self.open.get(output.request_id) if self.on else None
        if span is None:
            return
        if output.text or output.token_ids or output.payloads:
            span.outputs += 1
            span.first_output = span.first_output or time.time()
        if ended:
            self.ended(output.request_id, output.error.message if output.error else None)

    def ended(self, request_id: str, error: str | None = None) -> None:
        span = self.open.pop(request_id, None) if self.on else None
        if span is None:
            return
        attributes = {
            "omnistage.request_id": request_id,
            "omnistage.stage": self.spec.stage,
            "omnistage.replica_id": self.spec.replica_id,
            "omnistage.host": self.host,
            "omnistage.outputs": span.outputs,
            "omnistage.first_output_s": span.first_output - span.started if span.first_output else None,
        }
        tracing.record_span(
            f"stage {self.spec.stage}", service="replica", traceparent=tracing.new_child(span.parent),
            parent=span.parent, start=span.started, end=time.time(), attributes=attributes, error=error,
        )  # fmt: skip
