"""A stage group's engines in one process, presented to the replica host as one StageEngine.

Each member stage's engine steps on its own thread (on a GPU, its own CUDA stream), as the
in-process pipeline runs them (`stages.orchestrator.replica_thread`). Their outputs come
back on one queue; `step()` takes what arrived, hands it to the next members in memory
(`workers.group_handover`) and returns what leaves the group, which the host publishes.

Failures: a member's input or step failing for one request fails that request only (its
error output leaves the group and every member drops the request). A member's step failing
with several requests in flight and none named (`error.request_id`) leaves that engine in an
unknown state: `step()` raises, and the host fails what runs and exits to be restarted.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable

from stages.config import PipelineConfig
from stages.engine import StageEngine
from stages.errors import InvalidRequest
from stages.groups import StageGroup
from stages.orchestrator.actions import SendAbort, SendToReplica
from stages.orchestrator.replica_streams import StageStream
from stages.orchestrator.replica_thread import ReplicaThread
from stages.protocol import StageError, StageOutput, StageRequest
from workers.group_handover import GroupHandover

log = logging.getLogger(__name__)

OUTPUT_WAIT_S = 0.02
"""Longest wait in `step()` for a member's outputs (bounds how long new input waits to be read)."""


class MemberFailed(RuntimeError):
    """A member's step failed and no single request caused it."""


class MemberThread(ReplicaThread):
    """A member engine's thread: a failing step fails the request it names (or the only one in
    flight); otherwise the whole group must restart."""

    def __init__(self, *args, on_fatal: Callable[[str], None], **kwargs):
        super().__init__(*args, **kwargs)
        self.on_fatal = on_fatal

    def _step(self) -> list[StageOutput]:
        try:
            return self._step_raising()
        except Exception as exception:
            culprit = getattr(exception, "request_id", None)
            if culprit is None and len(self.active) == 1:
                culprit = next(iter(self.active))
            message = f"the engine failed a step: {type(exception).__name__}: {exception}"
            if culprit in self.active:
                log.exception("stage %s: request %s failed a step", self.replica_id, culprit)
                self.engine.abort(culprit)
                self._fail(culprit, self.active[culprit], StageError(message=message))
                return []
            log.exception("stage %s: a step failed and no single request caused it", self.replica_id)
            self.on_fatal(f"stage {self.replica_id!r}: {message}")
            return []


class GroupChain(StageEngine):
    def __init__(
        self,
        pipeline: PipelineConfig,
        group: StageGroup,
        build: Callable[[str], StageEngine],
        streams: Callable[[str], StageStream | None] = lambda name: None,
    ):
        self.pipeline = pipeline
        self.group = group
        self.handover = GroupHandover(pipeline, group)
        self.arrived: queue.SimpleQueue[tuple[int, list[StageOutput]]] = queue.SimpleQueue()
        self.active: set[str] = set()
        self.fatal: str | None = None
        self.members: dict[int, MemberThread] = {}
        try:
            for stage_id in group.members:  # one after another: graph captures must not overlap
                self._start_member(stage_id, build, streams)
        except BaseException:
            self.shutdown()
            raise

    def _start_member(self, stage_id: int, build, streams) -> None:
        name = self.pipeline.stage(stage_id).name
        member = MemberThread(
            name,
            lambda: build(name),
            lambda _name, outputs: self.arrived.put((stage_id, outputs)),
            stream=streams(name),
            on_fatal=self._set_fatal,
        )
        member.start()
        member.ready.result()
        self.members[stage_id] = member

    def _set_fatal(self, message: str) -> None:
        self.fatal = self.fatal or message

    # ------------------------------------------------------------ StageEngine

    def add_request(self, request: StageRequest) -> None:
        if request.stage_id != self.group.entry:
            entry = self.pipeline.stage(self.group.entry).name
            raise InvalidRequest("stage_id", f"group {self.group.name!r} takes requests only into its entry {entry!r}")
        self.handover.admit(request)
        self.active.add(request.request_id)
        self._send(request)

    def add_chunk(self, request: StageRequest) -> None:
        if request.request_id in self.active:
            self._send(request)

    def abort(self, request_id: str) -> None:
        self.active.discard(request_id)
        self.handover.forget(request_id)
        for member in self.members.values():
            member.inbox.put(SendAbort(replica_id=member.replica_id, request_id=request_id))

    def has_unfinished(self) -> bool:
        return bool(self.active)

    def step(self) -> list[StageOutput]:
        leaving: list[StageOutput] = []
        try:
            batches = [self.arrived.get(timeout=OUTPUT_WAIT_S)]
        except queue.Empty:
            batches = []
        while not self.arrived.empty():
            batches.append(self.arrived.get_nowait())
        for _stage_id, outputs in batches:
            for output in outputs:
                leaving += self._route(output)
        if self.fatal is not None:
            raise MemberFailed(self.fatal)
        return leaving

    def shutdown(self) -> None:
        for member in self.members.values():
            member.stop()
        self.members.clear()

    # ------------------------------------------------------------ handover

    def _route(self, output: StageOutput) -> list[StageOutput]:
        request_id = output.request_id
        if request_id not in self.active:
            return []  # dropped: aborted, or failed in another member
        handover = self.handover.route(output)
        for stage_input in handover.inputs:
            self._send(stage_input)
        if output.error is not None:
            self.abort(request_id)
        elif self.handover.done(request_id):
            self.active.discard(request_id)
            self.handover.forget(request_id)
        return [handover.leaving] if handover.leaving is not None else []

    def _send(self, request: StageRequest) -> None:
        member = self.members[request.stage_id]
        member.inbox.put(SendToReplica(replica_id=member.replica_id, request=request))
