"""The entry stage's input processing (chat template, tokenizer, multimodal processor) off the
engine's step loop.

`family.prepare_request` can take a while (a long prompt through a chat template and a tokenizer,
audio and video through a processor). Run inline in `add_request` it would stall every other
request's steps on the replica meanwhile, so it runs on a small thread pool: `add_request` only
queues the request, and `step()` hands the engine whatever finished preparing, in arrival order,
before stepping it. A request that fails to prepare ends with an error output of its own; the
others go on. Chunks of a request still preparing wait for it.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from stages.engine import StageEngine
from stages.errors import InvalidRequest, StageFailure
from stages.protocol import StageError, StageOutput, StageRequest

if TYPE_CHECKING:
    from stages.config import StageDeployConfig
    from stages.models import ModelFamily

PREPARE_THREADS = 2
IDLE_WAIT_S = 0.005  # how long an idle engine's step waits for the preparations under way


@dataclass
class _Preparing:
    request: StageRequest
    future: Future
    chunks: list[StageRequest] = field(default_factory=list)


class PreparingEngine(StageEngine):
    """Runs the family's entry-stage input processing on threads before the engine sees a request."""

    def __init__(
        self, engine: StageEngine, family: ModelFamily, model_dir: str | Path, stage_deploy: StageDeployConfig
    ):
        self.engine = engine
        self.family = family
        self.model_dir = model_dir
        self.stage_deploy = stage_deploy
        self.preparing: dict[str, _Preparing] = {}
        self.order: deque[str] = deque()
        self.pool = ThreadPoolExecutor(PREPARE_THREADS, thread_name_prefix="prepare")

    def add_request(self, request: StageRequest) -> None:
        future = self.pool.submit(self._prepare, request)
        self.preparing[request.request_id] = _Preparing(request, future)
        self.order.append(request.request_id)

    def add_chunk(self, request: StageRequest) -> None:
        waiting = self.preparing.get(request.request_id)
        if waiting is not None:
            waiting.chunks.append(request)
        else:
            self.engine.add_chunk(request)

    def step(self) -> list[StageOutput]:
        if not self.engine.has_unfinished() and self.preparing:  # requests that came together batch together
            wait([item.future for item in self.preparing.values()], IDLE_WAIT_S)
        failed = self._hand_over_prepared()
        outputs = self.engine.step() if self.engine.has_unfinished() else []
        return failed + outputs

    def abort(self, request_id: str) -> None:
        waiting = self.preparing.pop(request_id, None)
        if waiting is not None:
            waiting.future.cancel()
        else:
            self.engine.abort(request_id)

    def has_unfinished(self) -> bool:
        return bool(self.preparing) or self.engine.has_unfinished()

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.engine.shutdown()

    def __getattr__(self, name: str):
        if name == "engine":
            raise AttributeError(name)
        return getattr(self.engine, name)

    def _prepare(self, request: StageRequest) -> StageRequest:
        try:
            return self.family.prepare_request(request, self.model_dir, self.stage_deploy)
        except StageFailure:
            raise
        except Exception as error:  # a bad template input fails this request only
            raise InvalidRequest("messages", f"could not prepare the prompt: {error}") from error

    def _hand_over_prepared(self) -> list[StageOutput]:
        """Give the engine every request that finished preparing, in arrival order; error outputs
        for those that failed (preparing, or refused by the engine)."""
        failed = []
        while self.order:
            request_id = self.order[0]
            waiting = self.preparing.get(request_id)
            if waiting is None:  # aborted while preparing
                self.order.popleft()
                continue
            if not waiting.future.done():
                break
            self.order.popleft()
            del self.preparing[request_id]
            try:
                self.engine.add_request(waiting.future.result())
                for chunk in waiting.chunks:
                    self.engine.add_chunk(chunk)
            except StageFailure as failure:
                failed.append(_failure_output(waiting.request, failure))
        return failed


def _failure_output(request: StageRequest, failure: StageFailure) -> StageOutput:
    error = StageError(message=failure.message, type=failure.error_type, param=failure.param)
    return StageOutput(
        request_id=request.request_id, stage_id=request.stage_id, seq=0, finished=True, finish_reason="error",
        error=error,
    )  # fmt: skip
