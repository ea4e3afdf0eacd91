"""The orchestrator: a pure core (`Orchestrator.handle(event) -> actions`) and drivers.

Importing this package imports no torch, no asyncio driver and no engines, so the
control plane can drive the core from Redis streams (DESIGN.md §2).

Driving the core (what `inprocess.py` does, and what a Redis-stream driver does):

- Tell it what exists: `DeploymentUp(deployment_id, pipeline, deploy)` for each deployment,
  `ReplicaUp(replica_id, deployment_id, stage)` when a replica is ready (repeating it on
  every heartbeat is harmless), `ReplicaDown(replica_id, reason)` when its heartbeat stops.
- Feed it requests and outputs: `Submit`, `InputChunk`, `Cancel`, `StageOutputEvent`
  (with the replica id it came from), and a `Tick` every ~100 ms. Stamp every event's `at`
  with one clock; a platform driver whose state outlives the process uses wall time.
- Carry out the actions in order: `SendToReplica` (seq 0 -> `engine.add_request`, later
  seqs -> `add_chunk`), `SendAbort`, `Emit` to the client, `Complete` / `Fail` to end,
  `Discard` (free shared-memory payloads nobody will read: ask their writers).
  Ids on the wire may carry an attempt suffix after a re-route (`parse_wire_id`).
- Persist: after handling a batch, `take_changes()` says which request states changed
  (store `encode_state(core.requests[id])`) and which ended (delete them). A restarted
  orchestrator sends DeploymentUp, then `restore(decode_state(blob))` for each stored one.
- Events may arrive twice or out of order (at-least-once streams): outputs are idempotent
  by (request, stage, seq), a repeated Submit of a live or recently ended request is ignored.
"""

from stages.orchestrator.actions import (
    Action,
    Complete,
    Discard,
    Emit,
    Fail,
    RequestSummary,
    SendAbort,
    SendToReplica,
)
from stages.orchestrator.core import Orchestrator
from stages.orchestrator.events import (
    Cancel,
    DeploymentDown,
    DeploymentUp,
    Event,
    InputChunk,
    ReplicaDown,
    ReplicaDraining,
    ReplicaUp,
    StageOutputEvent,
    Submit,
    Tick,
)
from stages.orchestrator.state import RequestState, decode_state, encode_state, parse_wire_id, wire_id

__all__ = [
    "Action",
    "Cancel",
    "Complete",
    "DeploymentDown",
    "DeploymentUp",
    "Discard",
    "Emit",
    "Event",
    "Fail",
    "InputChunk",
    "Orchestrator",
    "ReplicaDown",
    "ReplicaDraining",
    "ReplicaUp",
    "RequestState",
    "RequestSummary",
    "SendAbort",
    "SendToReplica",
    "StageOutputEvent",
    "Submit",
    "Tick",
    "decode_state",
    "encode_state",
    "parse_wire_id",
    "wire_id",
]
