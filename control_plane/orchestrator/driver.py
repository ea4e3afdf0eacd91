"""The Redis-streams driver of the orchestrator core.

Inputs, all through consumer groups (at-least-once, acknowledged after processing):
- the orchestrator inbox: client events (Submit, Cancel, InputChunk) and replica status;
- one output stream per deployment: the StageOutputs its replicas publish.

Outputs: stage requests and aborts onto replica input streams, client outputs onto the
stream the request's client reads (`Submit.reply_to`, shared by its requests) or else one
stream per request. Request state lives in Redis (one key per request, versioned), so an
orchestrator can be restarted and two can run at once: each event is handled under a
per-request lock after reloading that request's state if another orchestrator changed it.
Liveness of replicas comes from their heartbeat keys; the reconciler (one leader at a
time) turns the deployments' desired state into lifecycle tasks.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import time
import uuid

import msgspec
import redis
from django.conf import settings
from django.db import close_old_connections

from control_plane.deployments.heartbeats import replica_statuses
from control_plane.deployments.models import Deployment, Replica
from control_plane.deployments.reconciler import reconcile, warmup_failed, warmup_succeeded
from control_plane.orchestrator import wire
from control_plane.orchestrator.spans import record_orchestrate_span
from stages import streams
from stages.config import load_deploy_config, load_pipeline_config
from stages.orchestrator import (
    Action,
    Complete,
    DeploymentDown,
    DeploymentUp,
    Discard,
    Emit,
    Event,
    Fail,
    Orchestrator,
    ReplicaDown,
    ReplicaDraining,
    ReplicaUp,
    SendAbort,
    SendToReplica,
    StageOutputEvent,
    Tick,
    decode_state,
    encode_state,
)
from stages.protocol import Abort, Release, StageOutput, encode

log = logging.getLogger(__name__)

_output_decoder = msgspec.msgpack.Decoder(StageOutput)
REQUEST_LOCK_MS = 5000
_LOCK_ALL = """
for _, key in ipairs(KEYS) do
    if redis.call('exists', key) == 1 then return 0 end
end
for _, key in ipairs(KEYS) do
    redis.call('set', key, ARGV[1], 'px', ARGV[2])
end
return 1
"""
_UNLOCK_ALL = """
for _, key in ipairs(KEYS) do
    if redis.call('get', key) == ARGV[1] then redis.call('del', key) end
end
return 1
"""


class Batch:
    """Events to handle together, and the stream entries to acknowledge once they are."""

    def __init__(self):
        self.events: list[tuple[Event, str | None]] = []
        self.acks: dict[str, list] = {}

    def add(self, decoded: tuple[Event, str | None] | None, stream: str | None, entry_id) -> None:
        if decoded is not None:
            self.events.append(decoded)
        if stream is not None:
            self.acks.setdefault(stream, []).append(entry_id)


class RedisOrchestrator:
    def __init__(self, client: redis.Redis, *, orchestrator_id: str | None = None, block_ms: int = 100):
        self.redis = client
        self.id = orchestrator_id or f"{socket.gethostname()}:{os.getpid()}"
        self.core = Orchestrator()
        self.block_ms = block_ms
        self.versions: dict[str, int] = {}
        self.deployments: dict[str, str] = {}  # id -> name, those the core routes for
        self.replicas_up: set[str] = set()
        self.replicas_draining: set[str] = set()
        self.deploy_configs: dict[str, dict] = {}  # id -> the deploy config the core routes with
        self.warmups: dict[str, str] = {}  # deployment id -> the warm-up request this leader sent last
        self._groups: set[str] = set()
        self._last_sync = self._last_tick = self._last_reconcile = self._last_claim = 0.0

    # ------------------------------------------------------------------ loop

    def run_once(self) -> None:
        now = time.monotonic()
        if now - self._last_sync >= 0.5:
            self._last_sync = now
            self.sync_deployments()
            self.sync_replicas()
        if now - self._last_reconcile >= 1.0:
            self._last_reconcile = now
            if self.is_leader():
                self.reconcile()
        if now - self._last_tick >= 1.0:
            self._last_tick = now
            self.tick()
        if now - self._last_claim >= 3.0:
            self._last_claim = now
            self.claim_abandoned()
        self.read_streams()

    def read_streams(self) -> None:
        names = [streams.orchestrator_inbox()] + [streams.deployment_output(d) for d in self.deployments]
        for name in names:
            self._ensure_group(name)
        entries = self.redis.xreadgroup(
            streams.ORCHESTRATOR_GROUP, self.id, {name: ">" for name in names}, count=512, block=self.block_ms
        )
        batch = Batch()
        for stream, messages in entries or []:
            for entry_id, fields in messages:
                batch.add(self._decode_entry(stream.decode(), fields), stream, entry_id)
        if batch.acks:
            self.process(batch)

    def claim_abandoned(self) -> None:
        """Take over pending entries of orchestrators that are no longer alive."""
        prefix = streams.orchestrator_heartbeat("")
        live = {key.decode().removeprefix(prefix) for key in self.redis.scan_iter(match=prefix + "*")}
        names = [streams.orchestrator_inbox()] + [streams.deployment_output(d) for d in self.deployments]
        for name in names:
            self._ensure_group(name)
            for consumer in self.redis.xinfo_consumers(name, streams.ORCHESTRATOR_GROUP):
                consumer_name = consumer["name"].decode() if isinstance(consumer["name"], bytes) else consumer["name"]
                if consumer_name == self.id or consumer_name in live or not consumer["pending"]:
                    continue
                pending = self.redis.xpending_range(name, streams.ORCHESTRATOR_GROUP, "-", "+", 1000, consumer_name)
                ids = [p["message_id"] for p in pending]
                if ids:
                    batch = Batch()
                    for entry_id, fields in self.redis.xclaim(name, streams.ORCHESTRATOR_GROUP, self.id, 0, ids):
                        batch.add(self._decode_entry(name, fields) if fields else None, name, entry_id)
                    self.process(batch)
                self.redis.xgroup_delconsumer(name, streams.ORCHESTRATOR_GROUP, consumer_name)

    def _ensure_group(self, name: str) -> None:
        if name in self._groups:
            return
        try:
            self.redis.xgroup_create(name, streams.ORCHESTRATOR_GROUP, id="0", mkstream=True)
        except redis.ResponseError as error:
            if "BUSYGROUP" not in str(error):
                raise
        self._groups.add(name)

    def forget_groups(self) -> None:
        """After a Redis restart every stream and group is gone: recreate them lazily."""
        self._groups.clear()

    # -------------------------------------------------------------- entries

    def _decode_entry(self, stream: str, fields: dict) -> tuple[Event, str | None] | None:
        kind = fields.get(b"kind", b"output").decode()
        try:
            if kind == "event":
                event = wire.decode_event(fields[b"data"])
                return event, wire.request_id_of(event)
            if kind == "replica_status":
                self._last_sync = 0.0  # react on the next loop turn
                return None
            output = _output_decoder.decode(fields[b"data"])
            replica = fields.get(b"replica", b"").decode() or None
            event = StageOutputEvent(output=output, replica_id=replica, at=time.time())
            return event, self.core.request_for(output.request_id)
        except Exception:
            log.exception("orchestrator could not decode a %s entry of %s", kind, stream)
            return None

    def handle(self, event: Event, request_id: str | None) -> None:
        batch = Batch()
        batch.add((event, request_id), None, None)
        self.process(batch)

    def process(self, batch: Batch, every_request_of: list[str] | None = None) -> None:
        """Handle a batch of events in three Redis round trips: lock and load the requests they
        touch, run the core, then write actions, state, unlocks and acknowledgements at once.

        With `every_request_of`, every active request of those deployments is loaded too
        (deployment-wide events: a replica went down, time passed).
        """
        request_ids = {request_id for _, request_id in batch.events if request_id}
        if every_request_of is not None:
            pipe = self.redis.pipeline(transaction=False)
            for deployment_id in every_request_of:
                pipe.smembers(streams.active_requests(deployment_id))
            for members in pipe.execute():
                request_ids |= {member.decode() for member in members}
            request_ids |= set(self.core.requests)
        token = uuid.uuid4().hex
        locks = self._lock_and_load(sorted(request_ids), token)
        actions: list[Action] = []
        for event, _ in batch.events:
            try:
                actions += self.core.handle(event)
            except Exception:
                log.exception("orchestrator core failed on %s", type(event).__name__)
        pipe = self.redis.pipeline(transaction=False)
        self._queue_actions(pipe, actions)
        self._queue_persist(pipe)
        if locks:
            pipe.eval(_UNLOCK_ALL, len(locks), *locks, token)
        for stream, entry_ids in batch.acks.items():
            pipe.xack(stream, streams.ORCHESTRATOR_GROUP, *entry_ids)
            pipe.xdel(stream, *entry_ids)  # the streams hold only what is still to be processed
        pipe.execute()

    # ---------------------------------------------------------- request state

    def _lock_and_load(self, request_ids: list[str], token: str, timeout_s: float = 10.0) -> list[str]:
        """Take the locks of all the requests at once, or none, and adopt each one's stored state if
        another orchestrator changed it. All or none: two orchestrators that each held part of the
        other's batch while waiting for the rest would wait each other out."""
        if not request_ids:
            return []
        keys = [streams.request_lock(request_id) for request_id in request_ids]
        deadline = time.monotonic() + timeout_s
        while True:
            pipe = self.redis.pipeline(transaction=False)
            pipe.eval(_LOCK_ALL, len(keys), *keys, token, REQUEST_LOCK_MS)
            for request_id in request_ids:
                pipe.hmget(streams.request_state(request_id), ["v", "state"])
            taken, *stored = pipe.execute()
            if taken or time.monotonic() > deadline:
                break
            time.sleep(random.uniform(0.001, 0.004))
        if not taken:  # a holder that outlives its lock's expiry keeps taking it again
            log.error("requests %s stayed locked for %.0f s; handling them anyway", request_ids[:5], timeout_s)
        for request_id, raw in zip(request_ids, stored, strict=True):
            self._adopt(request_id, raw)
        return keys if taken else []

    def _adopt(self, request_id: str, raw: list) -> None:
        version = int(raw[0]) if raw[0] else None
        if version is None:
            if request_id in self.core.requests and request_id in self.versions:
                self.core.forget(request_id)  # ended elsewhere
                self.versions.pop(request_id, None)
            return
        if self.versions.get(request_id) == version and request_id in self.core.requests:
            return
        self.core.forget(request_id)
        self.core.restore(decode_state(raw[1]))
        self.versions[request_id] = version

    def _queue_persist(self, pipe) -> None:
        changed, removed = self.core.take_changes()
        for request_id in changed:
            state = self.core.requests.get(request_id)
            if state is None:
                continue
            version = self.versions.get(request_id, 0) + 1
            self.versions[request_id] = version
            key = streams.request_state(request_id)
            pipe.hset(key, mapping={"v": version, "state": encode_state(state)})
            pipe.expire(key, int(settings.REQUEST_STREAM_TTL_S * 6))
            pipe.sadd(streams.active_requests(state.deployment_id), request_id)
        for request_id in removed:
            self.versions.pop(request_id, None)
            pipe.delete(streams.request_state(request_id))
            for deployment_id in self.deployments:
                pipe.srem(streams.active_requests(deployment_id), request_id)

    def _with_all_requests(self, deployment_ids, event: Event) -> None:
        """Handle a deployment-wide event (replica down, tick) over every active request, reloaded."""
        batch = Batch()
        batch.add((event, None), None, None)
        self.process(batch, every_request_of=list(deployment_ids))

    # ---------------------------------------------------------------- actions

    def _execute(self, actions: list[Action]) -> None:
        pipe = self.redis.pipeline(transaction=False)
        self._queue_actions(pipe, actions)
        pipe.execute()

    def _queue_actions(self, pipe, actions: list[Action]) -> None:
        ttl = settings.REQUEST_STREAM_TTL_S
        for action in actions:
            if isinstance(action, SendToReplica):
                pipe.xadd(streams.replica_input(action.replica_id), {"kind": "request", "data": encode(action.request)})
            elif isinstance(action, SendAbort):
                pipe.zadd(streams.aborted_requests(), {action.request_id: time.time()})
                message = encode(Abort(request_id=action.request_id))
                pipe.xadd(streams.replica_input(action.replica_id), {"kind": "abort", "data": message})
            elif isinstance(action, Discard):
                self._queue_releases(pipe, action)
            elif isinstance(action, Emit | Complete | Fail):
                warming = wire.warmup_deployment_of(action.request_id)
                if warming is not None:
                    self._warmup_result(action, warming)
                    continue
                if isinstance(action, Complete | Fail):
                    record_orchestrate_span(action)
                if action.reply_to is None:
                    key = streams.request_output(action.request_id)
                    pipe.xadd(key, wire.client_message(action))
                else:
                    key = action.reply_to
                    pipe.xadd(key, wire.reply_message(action), maxlen=wire.REPLY_STREAM_MAXLEN, approximate=True)
                pipe.expire(key, ttl)

    def _queue_releases(self, pipe, action: Discard) -> None:
        """Only a segment's writer can free it (it lives in its host's /dev/shm): tell each writer."""
        keys_by_owner: dict[str, list[str]] = {}
        for payload in action.payloads:
            if payload.owner:
                keys_by_owner.setdefault(payload.owner, []).append(payload.key)
        for owner, keys in keys_by_owner.items():
            pipe.xadd(streams.replica_input(owner), {"kind": "release", "data": encode(Release(keys=keys))})

    def _warmup_result(self, action: Action, deployment_id: str) -> None:
        if isinstance(action, Emit):
            return
        if isinstance(action, Complete):
            log.info("deployment %s warmed up", self.deployments.get(deployment_id, deployment_id))
            warmup_succeeded(deployment_id)
        else:
            log.warning("warm-up of %s failed: %s", deployment_id, action.error.message)
            warmup_failed(deployment_id, action.error.message)

    # ---------------------------------------------------- deployments, replicas

    def sync_deployments(self) -> None:
        close_old_connections()
        wanted = {
            str(d.id): d
            for d in Deployment.objects.select_related("pipeline").filter(desired_state=Deployment.Desired.RUNNING)
        }
        for deployment_id, deployment in wanted.items():
            if (
                deployment_id not in self.deployments
                or self.deploy_configs.get(deployment_id) != deployment.deploy_config
            ):
                # new, or its config changed (a revision finished rolling out)
                event = DeploymentUp(
                    deployment_id=deployment_id,
                    pipeline=load_pipeline_config(deployment.pipeline.config),
                    deploy=load_deploy_config(deployment.deploy_config),
                    at=time.time(),
                )
                self._execute(self.core.handle(event))
                self.deployments[deployment_id] = deployment.name
                self.deploy_configs[deployment_id] = deployment.deploy_config
        for deployment_id in set(self.deployments) - set(wanted):
            self._with_all_requests([deployment_id], DeploymentDown(deployment_id=deployment_id, at=time.time()))
            del self.deployments[deployment_id]
            self.deploy_configs.pop(deployment_id, None)

    def sync_replicas(self) -> None:
        replicas = list(
            Replica.objects.filter(deployment_id__in=list(self.deployments)).values_list(
                "id", "deployment_id", "stage", "state"
            )
        )
        statuses = replica_statuses([str(r[0]) for r in replicas])
        for replica_id, deployment_id, stage, row_state in replicas:
            replica_id = str(replica_id)
            status = statuses.get(replica_id)
            draining = status is not None and status.state == "DRAINING"
            if replica_id in self.replicas_up and (draining or row_state == "DRAINING"):
                # it finishes what it holds; nothing new goes there (and it is not "down")
                if replica_id not in self.replicas_draining:
                    self.replicas_draining.add(replica_id)
                    self._execute(self.core.handle(ReplicaDraining(replica_id=replica_id, at=time.time())))
                if draining:
                    continue
            ready = status is not None and status.state == "READY"
            if ready and replica_id not in self.replicas_up:
                self.replicas_up.add(replica_id)
                event = ReplicaUp(
                    replica_id=replica_id,
                    deployment_id=str(deployment_id),
                    stage=stage,
                    host=status.host,
                    at=time.time(),
                )
                self._with_all_requests([str(deployment_id)], event)
            elif not ready and replica_id in self.replicas_up:
                self.replicas_up.discard(replica_id)
                self.replicas_draining.discard(replica_id)
                reason = status.error if status and status.error else "the replica stopped heart-beating"
                event = ReplicaDown(
                    replica_id=replica_id, reason=reason or "the replica is not serving", at=time.time()
                )
                self._with_all_requests([str(deployment_id)], event)
        known = {str(r[0]) for r in replicas}
        for gone in self.replicas_up - known:
            self.replicas_up.discard(gone)
            self.replicas_draining.discard(gone)
            self._with_all_requests(
                list(self.deployments), ReplicaDown(replica_id=gone, reason="replica removed", at=time.time())
            )

    def tick(self) -> None:
        self._with_all_requests(list(self.deployments), Tick(at=time.time()))
        forgotten_before = time.time() - settings.REQUEST_STREAM_TTL_S * 6  # as long as a request's state lives
        self.redis.zremrangebyscore(streams.aborted_requests(), "-inf", forgotten_before)

    def is_leader(self) -> bool:
        key = streams.reconciler_leader()
        if self.redis.set(key, self.id, nx=True, px=5000):
            return True
        if self.redis.get(key) == self.id.encode():
            self.redis.pexpire(key, 5000)
            return True
        return False

    def reconcile(self) -> None:
        close_old_connections()
        result = reconcile()
        warming = {str(deployment.id): deployment for deployment in result.warmups}
        self.warmups = {d: r for d, r in self.warmups.items() if d in warming}
        for deployment_id, deployment in warming.items():
            if self._warmup_in_flight(deployment_id):
                continue
            self.sync_deployments()
            self.sync_replicas()
            request_id = wire.warmup_request_id(deployment_id)
            self.warmups[deployment_id] = request_id
            self.handle(wire.warmup_submit(deployment_id, request_id, deployment.pipeline.config), request_id)

    def _warmup_in_flight(self, deployment_id: str) -> bool:
        """Whether the warm-up this leader sent is still running (its state is in Redis until it
        ends, on whichever orchestrator)."""
        request_id = self.warmups.get(deployment_id)
        return request_id is not None and bool(self.redis.exists(streams.request_state(request_id)))
