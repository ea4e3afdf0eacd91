"""The orchestrator's span of a request (stages.tracing): from its submission to its ending,
recorded when the core completes or fails it, under the submitter's span."""

from __future__ import annotations

import time

from stages import tracing
from stages.orchestrator import Complete, Fail


def record_orchestrate_span(action: Complete | Fail) -> None:
    if not action.trace or not tracing.enabled():
        return
    end = time.time()
    summary = action.summary
    attributes = {
        "omnistage.request_id": action.request_id,
        "omnistage.attempts": summary.attempts,
        "omnistage.finish_reason": summary.finish_reason,
        **{f"omnistage.{name}": value for name, value in summary.metrics.items()},
    }
    tracing.record_span(
        tracing.ORCHESTRATE,
        service="orchestrator",
        traceparent=tracing.child(action.trace, tracing.ORCHESTRATE),
        parent=action.trace,
        start=action.submitted_at or end,
        end=end,
        attributes=attributes,
        error=action.error.message if isinstance(action, Fail) else None,
    )
