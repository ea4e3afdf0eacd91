"""The history writer: requests' history events from Redis into the database, in batches.

    HistoryWriter(client, consumer="host:pid").run(stop)        # manage.py history_writer

It reads notices from the history stream through the consumer group `history-writers`
(several writers share the work), applies the pending events of the requests they name in
one transaction per batch (history_log.history_catch_up), then acknowledges and deletes the
notices. After a batch that was not full it waits `linger_s` before reading again, so that
under load a batch holds many requests (and often a request's open and close together)
instead of one or two: what a batch costs beyond its rows is paid once for many. A writer that dies mid-batch leaves its notices pending in the group: any writer
claims notices idle for `claim_idle_s` and applies them again (idempotently). Every
`sweep_s` it also catches up whatever is still marked pending, so a request whose write
failed (the database was down, a row could not be written) is retried until it lands, and
closes `running` rows whose serving process is gone (orphan_sweep.py).
"""

from __future__ import annotations

import logging
import threading
import time

import redis
from django.db import close_old_connections

from control_plane.inference.history_log import history_catch_up, pending_requests
from control_plane.inference.orphan_sweep import close_orphans
from control_plane.inference.redis_names import stream_name

log = logging.getLogger(__name__)
GROUP = "history-writers"


class HistoryWriter:
    def __init__(
        self,
        client: redis.Redis,
        consumer: str,
        *,
        batch: int = 500,
        block_ms: int = 1000,
        claim_idle_s: float = 5.0,
        sweep_s: float = 10.0,
        linger_s: float = 0.1,
    ):
        self.client = client
        self.consumer = consumer
        self.batch = batch
        self.block_ms = block_ms
        self.claim_idle_s = claim_idle_s
        self.sweep_s = sweep_s
        self.linger_s = linger_s
        self.group_ready = False
        self.next_sweep = 0.0
        self.written = 0

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                if 0 < self.run_once() < self.batch:
                    stop.wait(self.linger_s)  # under load the next batch fills meanwhile: far fewer, larger batches
            except redis.ConnectionError as error:
                log.warning("redis unavailable (%s); retrying", error)
                self.group_ready = False
                stop.wait(1.0)
            except Exception:
                log.exception("history writer loop error")
                stop.wait(0.5)

    def run_once(self) -> int:
        """One batch: claim abandoned notices, read new ones, write their requests. Returns how many requests."""
        self._ensure_group()
        close_old_connections()
        entries = self._claim_abandoned() or self._read()
        requests = list(dict.fromkeys(request_id for _, request_id in entries))
        if requests:
            history_catch_up(requests)
            ids = [entry_id for entry_id, _ in entries]
            pipe = self.client.pipeline(transaction=False)
            pipe.xack(stream_name(), GROUP, *ids)
            pipe.xdel(stream_name(), *ids)
            pipe.execute()
            self.written += len(requests)
        if time.monotonic() >= self.next_sweep:
            self.next_sweep = time.monotonic() + self.sweep_s
            self.sweep()
        return len(requests)

    def sweep(self) -> None:
        """Catch up every request still marked pending (its notice was handled, its write failed)."""
        pending = pending_requests(everyone=True)
        for start in range(0, len(pending), self.batch):
            history_catch_up(pending[start : start + self.batch])
        close_orphans(self.client)

    def _ensure_group(self) -> None:
        if self.group_ready:
            return
        try:
            self.client.xgroup_create(stream_name(), GROUP, id="0", mkstream=True)
        except redis.ResponseError as error:
            if "BUSYGROUP" not in str(error):
                raise
        self.group_ready = True

    def _read(self) -> list[tuple[bytes, str]]:
        reply = self.client.xreadgroup(
            GROUP, self.consumer, {stream_name(): ">"}, count=self.batch, block=self.block_ms
        )
        return [entry for _, messages in reply or [] for entry in _entries(messages)]

    def _claim_abandoned(self) -> list[tuple[bytes, str]]:
        """Notices another writer (or this one, before a restart) read and never acknowledged."""
        reply = self.client.xautoclaim(
            stream_name(), GROUP, self.consumer, min_idle_time=int(self.claim_idle_s * 1000), count=self.batch
        )
        return _entries(reply[1])


def _entries(messages) -> list[tuple[bytes, str]]:
    return [(entry_id, fields[b"request"].decode()) for entry_id, fields in messages if fields]
