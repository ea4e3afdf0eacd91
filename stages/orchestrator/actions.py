"""What the orchestrator core asks its driver to do."""

from __future__ import annotations

import msgspec

from stages.protocol import PayloadRef, StageError, StageOutput, StageRequest


class RequestSummary(msgspec.Struct, kw_only=True):
    """How a request went: finish reason, timings (seconds) and token counts."""

    finish_reason: str | None = None
    metrics: dict[str, float] = {}
    """ttft_s, tpot_s, ttfp_s, e2el_s, audio_s, rtf, and per stage `stage.<name>.started_s` (after
    submission), `.duration_s`, `.first_output_s` (after its start) and `.outputs`."""
    usage: dict[str, int] = {}
    """prompt_tokens (what the entry stage read, when its engine says or the ids were given),
    completion_tokens, and `stage.<name>.output_tokens`."""
    attempts: int = 1
    output_marks: dict[str, list[float]] = {}
    """Per stage name: when its outputs with content came (a sample of at most 64), seconds after submission."""


class Action(msgspec.Struct, kw_only=True, tag=True):
    pass


class SendToReplica(Action, kw_only=True):
    """Deliver a stage request to a replica: `request.seq == 0` starts it (`add_request`),
    a later seq is an input chunk (`add_chunk`). Deliveries to one replica keep their order."""

    replica_id: str
    request: StageRequest


class SendAbort(Action, kw_only=True):
    """Tell a replica to drop a request (`engine.abort`). `request_id` is the id on the wire."""

    replica_id: str
    request_id: str


class ClientAction(Action, kw_only=True):
    """Something for the client of `request_id`, to go onto its `reply_to` stream (see `Submit`)."""

    request_id: str
    reply_to: str | None = None


class Emit(ClientAction, kw_only=True):
    """A client-visible output, in order per stage, with the client's request id."""

    output: StageOutput


class Complete(ClientAction, kw_only=True):
    summary: RequestSummary
    trace: str = ""
    """The submitter's traceparent, and when the request was submitted: the driver's span."""
    submitted_at: float | None = None


class Fail(ClientAction, kw_only=True):
    """The request ended without completing: bad input, engine error, timeout, cancellation
    (`error.type == "cancelled"`), or admission (`error.code == "queue_full"`)."""

    error: StageError
    summary: RequestSummary
    trace: str = ""
    submitted_at: float | None = None


class Discard(Action, kw_only=True):
    """Shared-memory payloads no stage will read (their request ended, or its attempt was
    abandoned, before they were delivered): ask each one's writer (`owner`) to free it."""

    payloads: list[PayloadRef]


AnyAction = SendToReplica | SendAbort | Emit | Complete | Fail | Discard
