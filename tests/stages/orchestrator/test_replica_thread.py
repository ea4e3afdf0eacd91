"""A replica thread (a stage of a group host) steps its engine back to back while the engine runs
pieces of work that produce no output yet; it blocks on its inbox only when a step found nothing
to compute."""

from __future__ import annotations

import threading

from stages.engine_stats import StepStats
from stages.orchestrator.actions import SendToReplica
from stages.orchestrator.replica_thread import ReplicaThread
from stages.protocol import StageOutput, StageRequest

PIECES = 5


class PiecedEngine:
    """Each request's one output comes after `PIECES` steps that report a batch but return nothing."""

    def __init__(self):
        self.running: dict[str, int] = {}
        self.last_step = StepStats()

    def add_request(self, request: StageRequest) -> None:
        self.running[request.request_id] = 0

    def add_chunk(self, request: StageRequest) -> None:
        pass

    def abort(self, request_id: str) -> None:
        self.running.pop(request_id, None)

    def has_unfinished(self) -> bool:
        return bool(self.running)

    def step(self) -> list[StageOutput]:
        self.last_step = StepStats(batch=len(self.running))
        done = []
        for request_id in list(self.running):
            self.running[request_id] += 1
            if self.running[request_id] > PIECES:
                del self.running[request_id]
                done.append(StageOutput(request_id=request_id, stage_id=0, seq=0, finished=True, finish_reason="stop"))
        return done

    def shutdown(self) -> None:
        pass


def test_steps_that_run_a_piece_without_output_do_not_block_on_the_inbox():
    delivered = threading.Event()
    replica = ReplicaThread("pieced", PiecedEngine, lambda replica_id, outputs: delivered.set())
    blocking_waits = []
    take_messages = replica._take_messages

    def recorded_take_messages(*, block, timeout=None):
        if block and replica.engine.has_unfinished():
            blocking_waits.append(timeout)
        return take_messages(block=block, timeout=timeout)

    replica._take_messages = recorded_take_messages
    replica.start()
    try:
        replica.ready.result(timeout=10)
        replica.inbox.put(SendToReplica(replica_id="pieced", request=StageRequest(request_id="a")))
        assert delivered.wait(timeout=10)
    finally:
        replica.stop()
    assert blocking_waits == []
