"""Which payloads of a replica's outputs may stay in this host's shared memory.

One may when a single downstream stage reads it (not the client: the API may run on
another host) and a live replica of that stage runs on this host, as their heartbeats
say: the orchestrator then places the request's next stage on this host (it prefers the
upstream replica's host). Replica hosts announce themselves in `streams.deployment_replicas`;
the answer is cached for `refresh_s`. A reader on another host all the same (the local one
was busy placing elsewhere, or died) is handed a segment it cannot map: it then asks the
writer for it (`workers.foreign_payloads`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec
import redis

from stages import streams
from stages.connectors import reader_is_local
from stages.protocol import ReplicaSpec, ReplicaStatus
from workers.replica_status import LIVE_STATES

REFRESH_S = 1.0


class PayloadRoutes:
    def __init__(
        self,
        client: redis.Redis,
        spec: ReplicaSpec,
        host: str,
        *,
        refresh_s: float = REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.client = client
        self.deployment_id = spec.deployment_id
        self.host = host
        self.client_modality, self.reader_stage = client_modality_and_reader(spec)
        self.refresh_s = refresh_s
        self.clock = clock
        self._local = False
        self._checked_at: float | None = None

    def stays_on_host(self, key: str) -> bool:
        """Whether the payload under `key` (`hidden`, `codes#2` …) may go through shared memory."""
        if self.reader_stage is None or key.split("#")[0] == self.client_modality:
            return False
        now = self.clock()
        if self._checked_at is None or now - self._checked_at >= self.refresh_s:
            self._local = reader_is_local(self.reader_hosts(), self.host)
            self._checked_at = now
        return self._local

    def reader_hosts(self) -> list[str]:
        """Hosts of the live replicas of the stage that reads this replica's payloads."""
        index = streams.deployment_replicas(self.deployment_id)
        members = [
            replica_id.decode()
            for replica_id, stage in self.client.hgetall(index).items()
            if stage.decode() == self.reader_stage
        ]
        if not members:
            return []
        hosts, gone = [], []
        beats = self.client.mget([streams.replica_heartbeat(member) for member in members])
        for member, raw in zip(members, beats, strict=True):
            status = _status(raw)
            if status is None:
                gone.append(member)
            elif status.state in LIVE_STATES:
                hosts.append(status.host)
        if gone:
            self.client.hdel(index, *gone)  # died without saying so (kill -9)
        return hosts


def client_modality_and_reader(spec: ReplicaSpec) -> tuple[str | None, str | None]:
    """The modality the client sees from this stage, and the one stage that reads its outputs
    (None when none or several do)."""
    pipeline = spec.pipeline
    if pipeline is None:
        return None, None
    stages = {stage.id: stage for stage in pipeline.stages}
    own = stages.get(spec.stage_id)
    edges = pipeline.downstream(spec.stage_id)
    reader = stages[edges[0].target].name if len(edges) == 1 else None
    return (own.output if own else None), reader


def _status(raw: bytes | None) -> ReplicaStatus | None:
    if not raw:
        return None
    try:
        return msgspec.json.decode(raw, type=ReplicaStatus)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
