"""Per-request routing state, kept as msgspec structs so a driver can persist it.

The Redis driver stores one `RequestState` per request (`encode_state` / `decode_state`)
and loads it back into a fresh core with `Orchestrator.restore(...)`; nothing else in
the core needs to survive a restart (replicas re-announce themselves by heartbeat).

Requests re-routed after a replica died travel under a new wire id
(`<request_id>~r<attempt>`), so late outputs of the dead attempt are told apart.
"""

from __future__ import annotations

import msgspec

from stages import tracing
from stages.protocol import SamplingParams, StageOutput, StageRequest

ATTEMPT_SEPARATOR = "~r"
MAX_OUTPUT_MARKS = 64


def wire_id(request_id: str, attempt: int) -> str:
    return request_id if attempt == 0 else f"{request_id}{ATTEMPT_SEPARATOR}{attempt}"


def parse_wire_id(value: str) -> tuple[str, int]:
    """(request id, attempt) of a wire id."""
    base, separator, attempt = value.rpartition(ATTEMPT_SEPARATOR)
    if separator and attempt.isdigit():
        return base, int(attempt)
    return value, 0


class StageProgress(msgspec.Struct, kw_only=True):
    """One stage of one request: where it runs, what was sent, what came back."""

    name: str
    replica_id: str | None = None
    sent_seq: int = 0
    """The seq the next input chunk sent to this stage gets."""
    next_output_seq: int = 0
    """The seq of the next output to process; lower ones were processed (duplicates)."""
    early: dict[int, StageOutput] = {}
    """Outputs that arrived ahead of `next_output_seq`."""
    outbox: list[StageRequest] = []
    """Inputs waiting for a replica of this stage to come up."""
    held: dict[int, list[StageOutput]] = {}
    """Outputs of non-streaming upstream stages (by source stage id), sent once the source finished."""
    sources_finished: list[int] = []
    finished: bool = False
    finish_reason: str | None = None
    waiting_since: float | None = None
    started_at: float | None = None
    first_output_at: float | None = None
    finished_at: float | None = None
    last_activity: float = 0.0
    output_tokens: int = 0
    outputs: int = 0
    """Outputs with content (a chunk, a delta) received from this stage."""
    output_marks: list[float] = []
    """When some of those outputs came, seconds after the request's submission: every
    `mark_every`-th one, so that at most MAX_OUTPUT_MARKS are kept whatever the length."""
    mark_every: int = 1

    @property
    def running(self) -> bool:
        return self.replica_id is not None and not self.finished

    def mark_output(self, since_submit: float) -> None:
        """Count an output with content; keep its time if it falls on the marking stride (the
        marks are halved, and the stride doubled, whenever they would exceed MAX_OUTPUT_MARKS)."""
        if self.outputs % self.mark_every == 0:
            self.output_marks.append(round(since_submit, 4))
            if len(self.output_marks) > MAX_OUTPUT_MARKS:
                self.output_marks = self.output_marks[::2]
                self.mark_every *= 2
        self.outputs += 1


class RequestState(msgspec.Struct, kw_only=True):
    request_id: str
    deployment_id: str
    entry: StageRequest
    """The entry stage's request as submitted (replayed on re-route)."""
    entry_chunks: list[StageRequest] = []
    sampling: dict[str, SamplingParams] = {}
    reply_to: str | None = None
    submitted_at: float
    attempt: int = 0
    stages: dict[int, StageProgress] = {}
    client_output_sent: bool = False
    first_text_at: float | None = None
    last_text_at: float | None = None
    prompt_tokens: int | None = None
    """What the entry stage's engine read (`num_prompt_tokens` of its outputs): the tokens of the
    text, audio and images of the prompt, after its chat template."""
    text_tokens: int = 0
    text_outputs: int = 0
    first_audio_at: float | None = None
    audio_seconds: float = 0.0
    finish_reason: str | None = None
    trace: str = ""
    """The submitter's traceparent (stages.tracing); stages get the orchestrator's span under it."""

    @property
    def stage_trace(self) -> str:
        """The traceparent the request's stage requests carry: the orchestrator's span."""
        return tracing.child(self.trace, tracing.ORCHESTRATE) if self.trace else ""

    @property
    def wire_id(self) -> str:
        return wire_id(self.request_id, self.attempt)


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(RequestState)


def encode_state(state: RequestState) -> bytes:
    return _encoder.encode(state)


def decode_state(data: bytes) -> RequestState:
    return _decoder.decode(data)
