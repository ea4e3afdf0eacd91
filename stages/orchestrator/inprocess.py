"""The in-process driver: the orchestrator core on an asyncio loop, engines on threads.

Each replica (one engine) runs its step loop on its own thread, taking requests, chunks
and aborts from an inbox and handing outputs back to the loop. The core runs only on the
loop thread, so it needs no locks. Used by `stages.Omni` / `AsyncOmni` and by tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from stages.config import DeployConfig, PipelineConfig
from stages.connectors.shared_memory import SharedMemoryConnector
from stages.engine import StageEngine
from stages.errors import InvalidRequest
from stages.groups import ungrouped
from stages.orchestrator.actions import Action, Complete, Discard, Emit, Fail, SendAbort, SendToReplica
from stages.orchestrator.core import Orchestrator
from stages.orchestrator.events import Cancel, DeploymentUp, Event, ReplicaUp, StageOutputEvent, Submit, Tick
from stages.orchestrator.replica_streams import stage_stream
from stages.orchestrator.replica_thread import ReplicaThread
from stages.protocol import SamplingParams, StageOutput, StageRequest

DEPLOYMENT_ID = "local"
ClientEvent = Emit | Complete | Fail


class InProcessDriver:
    """Runs a pipeline in this process. `await start()`, then `generate(...)` per request."""

    def __init__(
        self,
        pipeline: PipelineConfig,
        deploy: DeployConfig,
        build_engine: Callable[[str], StageEngine],
        *,
        tick_interval_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ):
        deploy.validate(pipeline)
        self.pipeline = pipeline
        self.deploy = ungrouped(deploy)  # every stage runs in this process already
        self.build_engine = build_engine
        self.tick_interval_s = tick_interval_s
        self.clock = clock
        self.core = Orchestrator(max_attempts=1, remember_finished=0)  # no redeliveries in process: ids may be reused
        self.replicas: dict[str, ReplicaThread] = {}
        self.streams: dict[str, asyncio.Queue[ClientEvent]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ticker: asyncio.Task | None = None
        self._ids = itertools.count()

    @classmethod
    def for_family(
        cls, family, model_dir: str | Path | None, pipeline: PipelineConfig, deploy: DeployConfig, **kwargs
    ) -> InProcessDriver:
        from stages.models import load_stage_engine

        def build(stage_name: str) -> StageEngine:
            stage_deploy = deploy.for_stage(pipeline.stage_named(stage_name))
            return load_stage_engine(family, stage_name, model_dir, stage_deploy, pipeline)

        return cls(pipeline, deploy, build, **kwargs)

    async def start(self) -> None:
        """Build every replica's engine on its own thread (off the loop: loading is slow), one after
        another, and start stepping."""
        self._loop = asyncio.get_running_loop()
        self._handle(
            DeploymentUp(deployment_id=DEPLOYMENT_ID, pipeline=self.pipeline, deploy=self.deploy, at=self.clock())
        )
        for stage in self.pipeline.stages:
            for index in range(self.deploy.for_stage(stage).replicas):
                replica_id = f"{stage.name}-{index}"
                replica = ReplicaThread(
                    replica_id,
                    functools.partial(self.build_engine, stage.name),
                    self._deliver_threadsafe,
                    stream=stage_stream(stage.kind, self.deploy.for_stage(stage)),
                )
                replica.start()
                try:
                    await asyncio.wrap_future(replica.ready)  # one at a time: graph captures must not overlap
                except BaseException:
                    replica.stop()
                    raise
                self.replicas[replica_id] = replica
                self._handle(
                    ReplicaUp(replica_id=replica_id, deployment_id=DEPLOYMENT_ID, stage=stage.name, at=self.clock())
                )
        self._ticker = asyncio.create_task(self._tick_forever())

    async def close(self) -> None:
        for request_id in list(self.core.requests):  # nobody waits forever on a closed driver
            self.cancel(request_id, "the pipeline was shut down")
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        for replica in self.replicas.values():
            await asyncio.to_thread(replica.stop)
        self.replicas.clear()

    def stop_replicas(self) -> None:
        """Stop every replica thread from the calling thread (at interpreter exit, where the
        loop's executor is gone already)."""
        for replica in list(self.replicas.values()):
            replica.stop()
        self.replicas.clear()

    async def generate(
        self, request: StageRequest, sampling: dict[str, SamplingParams] | None = None
    ) -> AsyncIterator[ClientEvent]:
        """Submit one request and yield its client events: Emits, then one Complete or Fail.
        Leaving the iteration early cancels the request."""
        if not request.request_id:
            request.request_id = f"req-{next(self._ids)}"
        if request.request_id in self.streams:
            raise InvalidRequest("request_id", f"request {request.request_id!r} is already running")
        stream: asyncio.Queue[ClientEvent] = asyncio.Queue()
        self.streams[request.request_id] = stream
        ended = False
        try:
            submit = Submit(deployment_id=DEPLOYMENT_ID, request=request, sampling=sampling or {}, at=self.clock())
            self._handle(submit)
            while True:
                event = await stream.get()
                ended = isinstance(event, Complete | Fail)
                yield event
                if ended:
                    return
        finally:
            if not ended:
                self._handle(Cancel(request_id=request.request_id, reason="the client went away", at=self.clock()))
            self.streams.pop(request.request_id, None)

    def cancel(self, request_id: str, reason: str = "cancelled by the client") -> None:
        self._handle(Cancel(request_id=request_id, reason=reason, at=self.clock()))

    def _deliver_threadsafe(self, replica_id: str, outputs: list[StageOutput]) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._deliver, replica_id, outputs)

    def _deliver(self, replica_id: str, outputs: list[StageOutput]) -> None:
        now = self.clock()
        for output in outputs:
            self._handle(StageOutputEvent(output=output, replica_id=replica_id, at=now))

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(self.tick_interval_s)
            self._handle(Tick(at=self.clock()))
            self.core.take_changes()  # nothing to persist in process

    def _handle(self, event: Event) -> None:
        for action in self.core.handle(event):
            self._perform(action)

    def _perform(self, action: Action) -> None:
        if isinstance(action, SendToReplica | SendAbort):
            self.replicas[action.replica_id].inbox.put(action)
        elif isinstance(action, Discard):
            for payload in action.payloads:  # engines here hand tensors over by value: rarely any
                SharedMemoryConnector().delete(payload)
        else:
            stream = self.streams.get(action.request_id)
            if stream is not None:
                stream.put_nowait(action)
