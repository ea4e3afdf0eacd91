"""One engine built and stepped on its own thread, fed through an inbox (the in-process replica host).

It takes `SendToReplica` / `SendAbort` actions, turns a failure in one request's input
into an error output for that request, and a failing `step()` into error outputs for the
requests the engine holds; the thread keeps serving either way.

On a GPU every replica thread builds and runs its engine on its own CUDA stream (of the priority,
and the share of the SMs, stages/orchestrator/replica_streams.py gives its stage). On the one
default stream each host sync of one stage (a sampler reading its tokens, a copy to the host)
would wait for everything the other stages queued before it: the talker's steps would wait
for the thinker's and code2wav's graph replays. A thread syncs its stream before it hands
outputs on, so whatever tensors they carry are complete; a CUDA tensor it receives is
recorded on its stream, so the allocator of the sending stream does not reuse it too early.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import queue
import threading
from collections.abc import Callable, Iterator

from stages.engine import StageEngine
from stages.engine_stats import clear_step_stats, step_stats
from stages.errors import StageFailure
from stages.orchestrator.actions import SendAbort, SendToReplica
from stages.orchestrator.replica_streams import StageStream, stepping_on
from stages.protocol import StageError, StageOutput

_STOP = object()


class ReplicaThread:
    """One engine and the thread that steps it."""

    def __init__(
        self,
        replica_id: str,
        build: Callable[[], StageEngine],
        deliver: Callable[[str, list[StageOutput]], None],
        *,
        stream: StageStream | None = None,
    ):
        self.replica_id = replica_id
        self.build = build
        self.engine: StageEngine | None = None
        self.ready: concurrent.futures.Future = concurrent.futures.Future()
        """Done once the engine is built (or failed to build: the exception)."""
        self.deliver = deliver
        self.stream_spec = stream
        self.stream = None
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.active: dict[str, int] = {}
        """request id -> stage id of the requests this engine holds, to fail them if `step()` raises."""
        self.thread = threading.Thread(target=self._run, name=f"replica-{replica_id}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.inbox.put(_STOP)
        self.thread.join(timeout=30)
        if self.engine is not None:
            self.engine.shutdown()

    def _run(self) -> None:
        with self._own_stream():
            try:
                self.engine = self.build()
            except BaseException as error:
                self.ready.set_exception(error)
                return
            self.ready.set_result(None)
            self._serve()

    @contextlib.contextmanager
    def _own_stream(self) -> Iterator[None]:
        with stepping_on(self.stream_spec) as stream:
            self.stream = stream
            yield

    def _serve(self) -> None:
        while True:
            if not self._take_messages(block=not self.engine.has_unfinished()):
                return
            if not self.engine.has_unfinished():
                continue
            clear_step_stats(self.engine)
            outputs = self._step()
            if outputs:
                if self.stream is not None:
                    self.stream.synchronize()  # the outputs' tensors are complete before another stream reads them
                self.deliver(self.replica_id, outputs)
            elif not step_stats(self.engine, outputs).batch and not self._take_messages(block=True, timeout=0.002):
                return  # requests wait for input chunks: block briefly instead of spinning

    def _take_messages(self, *, block: bool, timeout: float | None = None) -> bool:
        """Apply inbox messages; False once told to stop."""
        try:
            message = self.inbox.get(block=block, timeout=timeout)
        except queue.Empty:
            return True
        while True:
            if message is _STOP:
                return False
            self._apply(message)
            try:
                message = self.inbox.get_nowait()
            except queue.Empty:
                return True

    def _apply(self, message: SendToReplica | SendAbort) -> None:
        if isinstance(message, SendAbort):
            self.engine.abort(message.request_id)
            self.active.pop(message.request_id, None)
            return
        request = message.request
        if self.stream is not None:
            _record_on(self.stream, request)
        try:
            if request.seq == 0:
                self.engine.add_request(request)
                self.active[request.request_id] = request.stage_id
            else:
                self.engine.add_chunk(request)
        except StageFailure as failure:
            error = StageError(message=failure.message, type=failure.error_type, param=failure.param)
            self._fail(request.request_id, request.stage_id, error)
        except Exception as exception:  # an engine bug in one request must not stop the replica
            self._fail(
                request.request_id, request.stage_id, StageError(message=f"{type(exception).__name__}: {exception}")
            )

    def _step(self) -> list[StageOutput]:
        try:
            return self._step_raising()
        except Exception as exception:
            error = StageError(message=f"the engine failed a step: {type(exception).__name__}: {exception}")
            for request_id, stage_id in list(self.active.items()):
                self.engine.abort(request_id)
                self._fail(request_id, stage_id, error)
            return []

    def _step_raising(self) -> list[StageOutput]:
        outputs = self.engine.step()
        for output in outputs:
            if output.finished:
                self.active.pop(output.request_id, None)
        return outputs

    def _fail(self, request_id: str, stage_id: int, error: StageError) -> None:
        self.active.pop(request_id, None)
        failed = StageOutput(
            request_id=request_id, stage_id=stage_id, seq=0, finished=True, finish_reason="error", error=error
        )
        self.deliver(self.replica_id, [failed])


def _record_on(stream, request) -> None:
    """Mark the CUDA tensors a request brings as used by this stream (they were made on another)."""
    import torch

    for value in [request.inputs_embeds, *request.payloads.values()]:
        if isinstance(value, torch.Tensor) and value.is_cuda:
            value.record_stream(stream)
