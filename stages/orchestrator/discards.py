"""The shared-memory payloads a request's routing state still holds, to free when it ends.

Only shared-memory handles: they are never client-visible (a writer sends those through
Redis), so no client can still be reading one when the request ends. Redis payloads
expire on their own."""

from __future__ import annotations

from stages.orchestrator.actions import Action, Discard
from stages.orchestrator.state import RequestState
from stages.protocol import PayloadRef, StageOutput, StageRequest


def output_handles(output: StageOutput) -> list[PayloadRef]:
    return [value for value in output.payloads.values() if _is_shm(value)]


def request_handles(request: StageRequest) -> list[PayloadRef]:
    return [value for value in [*request.payloads.values(), request.inputs_embeds] if _is_shm(value)]


def undelivered_handles(state: RequestState) -> list[PayloadRef]:
    """Handles of outputs held back (non-streaming edges, or waiting for an earlier seq) and of
    inputs waiting for a replica: sent to no stage yet."""
    handles: list[PayloadRef] = []
    for progress in state.stages.values():
        for outputs in progress.held.values():
            for output in outputs:
                handles += output_handles(output)
        for output in progress.early.values():
            handles += output_handles(output)
        for request in progress.outbox:
            handles += request_handles(request)
    return handles


def discard(handles: list[PayloadRef]) -> list[Action]:
    return [Discard(payloads=handles)] if handles else []


def _is_shm(value) -> bool:
    return isinstance(value, PayloadRef) and value.connector == "shm"
