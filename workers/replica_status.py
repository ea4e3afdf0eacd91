"""What a replica host tells the control plane about itself.

Two channels (names in `stages.streams`): the heartbeat key holds the latest
`ReplicaStatus` as JSON and expires `ttl_s` after the last beat, so a host that dies
vanishes on its own; every state change is also an event on the orchestrator inbox
(`kind=replica_status`, msgpack), so the control plane reacts without polling.
While it runs, the host is also listed in its deployment's replica index
(`streams.deployment_replicas`), where the replicas upstream of it look for their readers.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable

import msgspec
import redis

from stages import streams
from stages.heartbeat import Heartbeat
from stages.protocol import ReplicaSpec, ReplicaState, ReplicaStatus, encode
from stages.replica_stats import DeviceUsage, StageStats
from workers.processes import is_replica_host

log = logging.getLogger(__name__)

LIVE_STATES: frozenset[str] = frozenset({"LOADING", "READY", "DRAINING"})
LEASE_TTLS = 2.0
"""A host whose heartbeat could not be written for this many TTLs has lost its lease."""
WEIGHTS_BEAT_S = 0.25
"""The shortest time between two heartbeats that carry weight bytes."""


def heartbeat_interval_s() -> float:
    return float(os.environ.get("OMNISTAGE_HEARTBEAT_INTERVAL", "2"))


def heartbeat_ttl_s() -> float:
    return float(os.environ.get("OMNISTAGE_HEARTBEAT_TTL", "10"))


def read_status(client: redis.Redis, replica_id: str) -> ReplicaStatus | None:
    """The replica's heartbeat, or None when it has none (never started, or stopped beating)."""
    raw = client.get(streams.replica_heartbeat(replica_id))
    if not raw:
        return None
    try:
        return msgspec.json.decode(raw, type=ReplicaStatus)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def serving_host(status: ReplicaStatus | None, replica_id: str) -> str | None:
    """ "host:pid" of the live host a heartbeat names, or None when no host serves the replica.

    On this machine the pid is checked (a host killed with -9 leaves its key for up to a
    TTL); a host elsewhere counts as live while its key is there."""
    if status is None or status.state not in LIVE_STATES:
        return None
    if status.host == socket.gethostname() and not is_replica_host(status.pid, replica_id):
        return None
    return f"{status.host}:{status.pid}"


class StatusReporter:
    def __init__(
        self,
        client: redis.Redis,
        spec: ReplicaSpec,
        *,
        queue_depth: Callable[[], int] = lambda: 0,
        running: Callable[[], int] = lambda: 0,
        transfers: Callable[[], dict] = dict,
        dropped_inputs: Callable[[], int] = lambda: 0,
        stats: Callable[[], StageStats | None] = lambda: None,
        device_usage: Callable[[], DeviceUsage | None] = lambda: None,
        interval_s: float | None = None,
        ttl_s: float | None = None,
    ):
        self.client = client
        self.key = streams.replica_heartbeat(spec.replica_id)
        self.queue_depth = queue_depth
        self.running = running
        self.transfers = transfers
        self.dropped_inputs = dropped_inputs
        self.stats = stats
        self.device_usage = device_usage
        self.index = streams.deployment_replicas(spec.deployment_id)
        self.ttl_s = ttl_s if ttl_s is not None else heartbeat_ttl_s()
        self.status = ReplicaStatus(
            replica_id=spec.replica_id,
            deployment_id=spec.deployment_id,
            stage=spec.stage,
            state="LOADING",
            host=socket.gethostname(),
            pid=os.getpid(),
            device=spec.device,
        )
        self._lock = threading.Lock()
        interval = interval_s if interval_s is not None else heartbeat_interval_s()
        self.heartbeat = Heartbeat(
            client,
            self.key,
            interval_s=interval,
            ttl_s=self.ttl_s,
            payload=self._payload,
            lease_after_s=LEASE_TTLS * self.ttl_s,
        )
        self._beating = False
        self._weights_beat_at = 0.0

    def claim(self) -> str | None:
        """Take the heartbeat key for this host. Returns "host:pid" of another live host instead, if one serves
        this replica already (then this host must not start)."""
        body = json.dumps(self._payload())
        if self.client.set(self.key, body, px=int(self.ttl_s * 1000), nx=True):
            return None
        owner = serving_host(read_status(self.client, self.status.replica_id), self.status.replica_id)
        if owner is not None and owner != f"{self.status.host}:{self.status.pid}":
            return owner
        self.client.set(self.key, body, px=int(self.ttl_s * 1000))
        return None

    def start(self) -> None:
        self.publish()
        self.heartbeat.start()
        self._beating = True
        self._listed(True)

    def set_state(
        self, state: ReplicaState, *, progress: float | None = None, error: str | None = None, permanent: bool = False
    ) -> None:
        with self._lock:
            changed = state != self.status.state
            self.status.state = state
            if state != "LOADING":
                self.status.phase = ""
            if progress is not None:
                self.status.progress = progress
            if error is not None:
                self.status.error = error
                self.status.permanent = permanent
        log.info("replica %s: %s%s", self.status.replica_id, state, f" ({error})" if error else "")
        self._beat_now()
        if changed:
            self.publish()

    def set_progress(self, progress: float, phase: str | None = None) -> None:
        with self._lock:
            self.status.progress = progress
            if phase is not None:
                self.status.phase = phase
        self._beat_now()

    def set_weights(self, loaded: int, total: int) -> None:
        """Bytes of weights read so far of their total: the loading progress while they load. Beats at
        most every WEIGHTS_BEAT_S (a loader reports each tensor), and when the last byte is read."""
        with self._lock:
            self.status.weights_loaded_bytes = loaded
            self.status.weights_total_bytes = total
            if total > 0:
                self.status.progress = loaded / total
                self.status.phase = "loading weights" if loaded < total else "building the engine"
        now = time.monotonic()
        if loaded >= total or now - self._weights_beat_at >= WEIGHTS_BEAT_S:
            self._weights_beat_at = now
            self._beat_now()

    def publish(self) -> None:
        """Send the current status to the orchestrator inbox."""
        snapshot = msgspec.convert(self._payload(), ReplicaStatus)
        try:
            self.client.xadd(streams.orchestrator_inbox(), {"kind": "replica_status", "data": encode(snapshot)})
        except redis.RedisError as failure:  # the heartbeat key still carries the state
            log.warning("replica %s: could not publish %s: %s", snapshot.replica_id, snapshot.state, failure)

    def stop(self) -> None:
        """Stop beating. An ERROR status stays readable until its TTL runs out; any other is removed."""
        if self._beating:
            self._listed(False)
            self.heartbeat.stop()  # deletes the key
            self._beating = False
        if self.status.state == "ERROR":
            self._beat_now()

    def _listed(self, listed: bool) -> None:
        replica_id = self.status.replica_id
        try:
            if listed:
                self.client.hset(self.index, replica_id, self.status.stage)
            else:
                self.client.hdel(self.index, replica_id)
        except redis.RedisError as failure:  # upstream replicas then use Redis for payloads: still correct
            log.warning("replica %s: could not update the replica index: %s", replica_id, failure)

    @property
    def lease_lost(self) -> bool:
        """Cut off from Redis long enough that the control plane has given this host up (its requests
        re-routed or failed, a restart scheduled): it must stop serving (`stages.heartbeat`)."""
        return self.heartbeat.lost.is_set()

    def _beat_now(self) -> None:
        try:
            self.heartbeat.beat(force=self.status.state == "ERROR")
        except redis.RedisError as failure:
            log.warning("replica %s: heartbeat failed: %s", self.status.replica_id, failure)

    def _payload(self) -> dict:
        try:
            depth = self.queue_depth()
        except redis.RedisError:
            depth = self.status.queue_depth
        with self._lock:
            self.status.queue_depth = depth
            self.status.running = self.running()
            self.status.transfers = self.transfers()
            self.status.dropped_inputs = self.dropped_inputs()
            self.status.stats = _quietly(self.stats)
            self.status.device_usage = _quietly(self.device_usage)
            self.status.ts = time.time()
            return msgspec.to_builtins(self.status)


def _quietly(read: Callable[[], object]):
    """A measurement for the heartbeat, or None when taking it failed (the beat still goes out)."""
    try:
        return read()
    except Exception:  # noqa: BLE001
        log.debug("a heartbeat measurement failed", exc_info=True)
        return None
