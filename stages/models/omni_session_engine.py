"""A stage engine over per-request sessions: the Qwen3-Omni talker stage.

Each request owns a `Session` (its KV cache, the upstream rows it waits for, its sampler).
`step()` advances every session that can move by one model step and returns what they
produced; a session that needs more upstream input (`ready()` is False) waits for
`add_chunk`. A failing session becomes an error output for its request only.

Sessions are stepped one after another with their own caches, not batched into one
forward. The thinkers of both Qwen-Omni families and the Qwen2.5-Omni talker run on the
continuous-batching AR engine (stages/ar/); the Qwen3 talker stays here until the AR engine
runs its code predictor (15 residual codes per frame, drawn between two talker steps). Every
session's numerics equal transformers' own `generate()` by construction, which the oracle
tests check.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from stages.engine import StageEngine
from stages.errors import InvalidRequest, StageFailure
from stages.protocol import StageError, StageOutput, StageRequest


class Session(Protocol):
    finished: bool

    def add_chunk(self, request: StageRequest) -> None: ...

    def ready(self) -> bool: ...

    def step(self) -> StageOutput | None: ...


class SessionEngine(StageEngine):
    def __init__(self, stage_id: int, open_session: Callable[[StageRequest], Session], max_batch: int = 16):
        self.stage_id = stage_id
        self.open_session = open_session
        self.max_batch = max_batch
        self.sessions: dict[str, Session] = {}
        self.seqs: dict[str, int] = {}
        self.started: dict[str, float] = {}

    def add_request(self, request: StageRequest) -> None:
        if request.request_id in self.sessions:
            raise InvalidRequest("request_id", f"request {request.request_id!r} is already running")
        if request.sampling is not None:
            request.sampling.validate()
        self.sessions[request.request_id] = self.open_session(request)
        self.seqs[request.request_id] = 0
        self.started[request.request_id] = time.perf_counter()

    def add_chunk(self, request: StageRequest) -> None:
        session = self.sessions.get(request.request_id)
        if session is None:
            return
        session.add_chunk(request)

    def step(self) -> list[StageOutput]:
        outputs = []
        for request_id in [rid for rid, session in self.sessions.items() if session.ready()][: self.max_batch]:
            output = self._step_one(request_id)
            if output is not None:
                outputs.append(output)
        return outputs

    def _step_one(self, request_id: str) -> StageOutput | None:
        session = self.sessions[request_id]
        try:
            output = session.step()
        except Exception as error:  # one request's failure never stops the others
            failed = self._error(request_id, error)
            self._drop(request_id)
            return failed
        if output is None:
            return None
        output.request_id, output.stage_id, output.seq = request_id, self.stage_id, self.seqs[request_id]
        self.seqs[request_id] += 1
        if output.finished:
            output.metrics["stage_duration_s"] = time.perf_counter() - self.started[request_id]
            self._drop(request_id)
        return output

    def _error(self, request_id: str, error: Exception) -> StageOutput:
        kind = "invalid_request_error" if isinstance(error, InvalidRequest) else "server_error"
        param = error.param if isinstance(error, StageFailure) else None
        message = error.message if isinstance(error, StageFailure) else f"{type(error).__name__}: {error}"
        return StageOutput(
            request_id=request_id,
            stage_id=self.stage_id,
            seq=self.seqs.get(request_id, 0),
            finished=True,
            finish_reason="error",
            error=StageError(message=message, type=kind, param=param),
        )

    def _drop(self, request_id: str) -> None:
        self.sessions.pop(request_id, None)
        self.seqs.pop(request_id, None)
        self.started.pop(request_id, None)

    def abort(self, request_id: str) -> None:
        self._drop(request_id)

    def has_unfinished(self) -> bool:
        return bool(self.sessions)

    def num_waiting(self) -> int:
        return sum(1 for session in self.sessions.values() if not session.ready())


def new_output(**fields: Any) -> StageOutput:
    """An output whose request id, stage id and seq the engine fills in."""
    return StageOutput(request_id="", **fields)
