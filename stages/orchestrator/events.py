"""What the orchestrator core reacts to. Every event carries `at`, the driver's clock.

The core reads no clock of its own: drivers stamp events (`time.monotonic()` in
process, wall time on the platform) and send `Tick` now and then so timeouts fire.
"""

from __future__ import annotations

import msgspec

from stages.config import DeployConfig, PipelineConfig
from stages.protocol import SamplingParams, StageOutput, StageRequest


class Event(msgspec.Struct, kw_only=True, tag=True):
    at: float = 0.0


class DeploymentUp(Event, kw_only=True):
    """A deployment (pipeline + deploy config) the orchestrator routes for; sent again on edits."""

    deployment_id: str
    pipeline: PipelineConfig
    deploy: DeployConfig


class DeploymentDown(Event, kw_only=True):
    """The deployment stops: its in-flight requests fail and their replicas get aborts."""

    deployment_id: str
    reason: str = "the deployment was stopped"


class ReplicaUp(Event, kw_only=True):
    """A replica of one stage of a deployment is ready to take requests (sent with each heartbeat is fine)."""

    replica_id: str
    deployment_id: str
    stage: str


class ReplicaDown(Event, kw_only=True):
    """A replica died or was stopped; its requests are re-routed or failed."""

    replica_id: str
    reason: str = "the replica stopped responding"


class ReplicaDraining(Event, kw_only=True):
    """A replica drains: it takes no new requests, and the ones it holds finish there."""

    replica_id: str


class Submit(Event, kw_only=True):
    """A client request for a deployment. `request` is the entry stage's input; `sampling`
    holds per-stage sampling parameters by stage name for the stages after the entry."""

    deployment_id: str
    request: StageRequest
    sampling: dict[str, SamplingParams] = {}
    reply_to: str | None = None
    """The stream the client reads this request's messages from, shared by its other requests
    (None: the request's own output stream)."""


class InputChunk(Event, kw_only=True):
    """More client input for a request submitted with `finished=False` (streamed input)."""

    request_id: str
    chunk: StageRequest


class StageOutputEvent(Event, kw_only=True):
    """A stage's output for one request, as delivered (possibly twice, possibly out of order)."""

    output: StageOutput
    replica_id: str | None = None


class Cancel(Event, kw_only=True):
    request_id: str
    reason: str = "cancelled by the client"


class Tick(Event, kw_only=True):
    """Time passes: fire per-hop and per-request timeouts."""


AnyEvent = (
    DeploymentUp
    | DeploymentDown
    | ReplicaUp
    | ReplicaDown
    | ReplicaDraining
    | Submit
    | InputChunk
    | StageOutputEvent
    | Cancel
    | Tick
)
