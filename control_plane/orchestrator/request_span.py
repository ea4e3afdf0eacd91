"""The web process's span of a request it serves (stages.tracing): the root of the request's
trace, from its submission until its last message (or the client leaving). The request carries
the span's context to the orchestrator in `StageRequest.trace`; one is made when it has none, in
the client's trace when it sent a valid `traceparent` (the span is then its child)."""

from __future__ import annotations

import time

from stages import tracing
from stages.protocol import StageRequest


class RequestSpan:
    def __init__(self, deployment_id: str, request: StageRequest, parent: str = ""):
        self.parent = parent if tracing.parse(parent) else ""
        if not request.trace:
            request.trace = tracing.new_child(self.parent) or tracing.new_traceparent()
        self.deployment_id = deployment_id
        self.request = request
        self.started = time.time()
        self.outcome = "cancelled"
        self.error: str | None = None

    def ending(self, outcome: str, error: str | None = None) -> None:
        self.outcome, self.error = outcome, error

    def record(self) -> None:
        if not tracing.enabled():
            return
        attributes = {
            "omnistage.request_id": self.request.request_id,
            "omnistage.deployment_id": self.deployment_id,
            "omnistage.outcome": self.outcome,
        }
        tracing.record_span(
            "request", service="web", traceparent=self.request.trace, parent=self.parent, start=self.started,
            end=time.time(), attributes=attributes, error=self.error if self.outcome != "complete" else None,
            server=True,
        )  # fmt: skip
