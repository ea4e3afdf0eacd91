"""A replica's input stream, read through the replica consumer group.

Entries carry `kind` ("request", "abort", "drain", "export", "release") and `data`
(msgpack of StageRequest, Abort, Drain, Export or Release). Each entry is acknowledged after the host processed it, and then
deleted: the stream then holds exactly the work not yet done, so its length is the
replica's queue depth. Pending entries of consumers that died (a host killed with -9)
are claimed by the next host of the same replica, so nothing stays pending.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass

import msgspec
import redis

from stages import streams
from stages.protocol import Abort, Drain, Export, Release, StageRequest, decoder
from workers.processes import is_replica_host, pid_alive

log = logging.getLogger(__name__)

_DECODERS = {
    "request": decoder(StageRequest),
    "abort": decoder(Abort),
    "drain": decoder(Drain),
    "export": decoder(Export),
    "release": decoder(Release),
}


@dataclass
class BadEntry:
    """An entry that could not be decoded. `request_id` / `stage_id` when they could be read."""

    reason: str
    request_id: str | None = None
    stage_id: int = 0


@dataclass
class InputEntry:
    entry_id: str
    message: StageRequest | Abort | Drain | Export | Release | BadEntry

    @property
    def time_ms(self) -> int:
        """When Redis took the entry (the first part of a stream id is the server's clock in ms)."""
        return int(self.entry_id.split("-", 1)[0])


def decode_entry(entry_id: bytes | str, fields: dict) -> InputEntry:
    entry_id = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    kind = fields.get(b"kind", b"").decode(errors="replace")
    data = fields.get(b"data", b"")
    if kind not in _DECODERS:
        return InputEntry(entry_id, BadEntry(f"unknown entry kind {kind!r}", *_loose_ids(data)))
    try:
        return InputEntry(entry_id, _DECODERS[kind].decode(data))
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        return InputEntry(entry_id, BadEntry(f"undecodable {kind} entry: {error}", *_loose_ids(data)))


def _loose_ids(data: bytes) -> tuple[str | None, int]:
    """Best effort: the request id and stage id of a malformed request, to fail just that request."""
    try:
        raw = msgspec.msgpack.decode(data)
    except msgspec.DecodeError:
        return None, 0
    if not isinstance(raw, dict) or not isinstance(raw.get("request_id"), str):
        return None, 0
    stage_id = raw.get("stage_id", 0)
    return raw["request_id"], stage_id if isinstance(stage_id, int) else 0


class ReplicaInput:
    def __init__(self, client: redis.Redis, replica_id: str, consumer: str | None = None):
        self.client = client
        self.replica_id = replica_id
        self.stream = streams.replica_input(replica_id)
        self.group = streams.REPLICA_GROUP
        self.hostname = socket.gethostname()
        self.consumer = consumer or f"{self.hostname}:{os.getpid()}"

    def ensure_group(self) -> None:
        """Create the consumer group (and the stream) and this consumer unless they exist; entries already in the
        stream are delivered too."""
        try:
            self.client.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis.ResponseError as error:
            if "BUSYGROUP" not in str(error):
                raise
        self.client.xgroup_createconsumer(self.stream, self.group, self.consumer)

    def claim_from_dead_consumers(self, stale_after_ms: int) -> list[InputEntry]:
        """Take over the pending entries of consumers that are gone, and drop those consumers.

        A consumer on this machine is gone when its pid is, or when that pid is now another
        process (the machine restarted: pids start over) and it has been idle longer than
        `stale_after_ms`; one elsewhere when it has been idle that long (a live host reads
        several times a second)."""
        claimed: list[InputEntry] = []
        for consumer in self.client.xinfo_consumers(self.stream, self.group):
            name = _text(consumer["name"])
            if name == self.consumer:
                if consumer["pending"]:  # a predecessor with this host's name and this pid (pids start over)
                    claimed += self._predecessor_pending()
                continue
            if not self._is_dead(name, consumer["idle"], stale_after_ms):
                continue
            if consumer["pending"]:
                claimed += self._claim(name)
            self.client.xgroup_delconsumer(self.stream, self.group, name)
            log.info("replica input %s: took over consumer %s", self.stream, name)
        return claimed

    def _is_dead(self, name: str, idle_ms: int, stale_after_ms: int) -> bool:
        hostname, _, pid = name.rpartition(":")
        if hostname == self.hostname and pid.isdigit():
            if not pid_alive(int(pid)):
                return True
            return idle_ms >= stale_after_ms and not is_replica_host(int(pid), self.replica_id)
        return idle_ms >= stale_after_ms

    def _predecessor_pending(self, most: int = 10_000) -> list[InputEntry]:
        """Entries pending under this consumer's own name before it read any: a previous process's."""
        reply = self.client.xreadgroup(self.group, self.consumer, {self.stream: "0"}, count=most)
        entries = reply[0][1] if reply else []
        gone = [entry_id for entry_id, fields in entries if not fields]
        if gone:  # trimmed away meanwhile: nothing to process, just clear them
            self.client.xack(self.stream, self.group, *gone)
        return [decode_entry(entry_id, fields) for entry_id, fields in entries if fields]

    def _claim(self, dead_consumer: str) -> list[InputEntry]:
        claimed = []
        while True:
            pending = self.client.xpending_range(self.stream, self.group, "-", "+", 100, consumername=dead_consumer)
            if not pending:
                return claimed
            ids = [item["message_id"] for item in pending]
            entries = self.client.xclaim(self.stream, self.group, self.consumer, 0, ids)
            claimed += [decode_entry(entry_id, fields) for entry_id, fields in entries if fields]
            deleted = {item["message_id"] for item in pending} - {entry_id for entry_id, fields in entries if fields}
            if deleted:  # trimmed away meanwhile: nothing to process, just clear them
                self.client.xack(self.stream, self.group, *deleted)

    def read(self, block_ms: int | None, count: int = 64) -> list[InputEntry]:
        """New entries for this consumer; waits up to `block_ms` for one (None: no wait)."""
        try:
            reply = self.client.xreadgroup(
                self.group, self.consumer, {self.stream: ">"}, count=count, block=block_ms or None
            )
        except redis.ResponseError as error:
            if "NOGROUP" not in str(error):
                raise
            self.ensure_group()  # Redis lost its data (a restart without persistence)
            return []
        if not reply:
            return []
        return [decode_entry(entry_id, fields) for entry_id, fields in reply[0][1]]

    def queue_done(self, pipe, entries: list[InputEntry]) -> None:
        """Queue the acknowledgement (and deletion) of processed entries on `pipe`."""
        ids = [entry.entry_id for entry in entries]
        pipe.xack(self.stream, self.group, *ids)
        pipe.xdel(self.stream, *ids)

    def done(self, entries: list[InputEntry]) -> None:
        """Acknowledge processed entries and delete them from the stream."""
        if not entries:
            return
        pipe = self.client.pipeline(transaction=False)
        self.queue_done(pipe, entries)
        try:
            pipe.execute()
        except redis.ResponseError as error:
            if "NOGROUP" not in str(error):
                raise  # else Redis lost the stream meanwhile: nothing left to acknowledge

    def depth(self) -> int:
        """Entries not yet processed (waiting or taken but not acknowledged)."""
        return self.client.xlen(self.stream)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
