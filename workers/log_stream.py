"""A replica host's recent log lines, published to a capped Redis stream for the console.

`publish_logs(client, replica_id)` adds a handler to the root logger: each record is formatted,
API keys in it are masked, and the line is queued; one daemon thread writes the queue to
`streams.replica_logs(replica_id)` (XADD with MAXLEN ~200; the key expires a day after its last
line). Logging never waits on Redis: when Redis is slow or down, or the queue is full, lines
are dropped and counted. Only what the host already logs leaves the process.
"""

from __future__ import annotations

import logging
import queue
import re
import threading

import redis

from stages import streams

MAX_LINES = 200
"""The stream's cap (approximate: Redis trims whole nodes, so a few more may stay)."""
KEEP_S = 24 * 3600
QUEUE_LINES = 1000
BATCH_LINES = 100
CLOSE_WAIT_S = 2.0
LINE_FORMAT = "%(asctime)s %(levelname)s pid %(process)d %(name)s: %(message)s"
API_KEY = re.compile(r"\bomni-([0-9a-f]{8})-[A-Za-z0-9_-]{8,}")
"""`omni-<prefix>-<secret>` (control_plane/accounts/keys.py): the prefix stays, the secret goes."""


def mask_api_keys(line: str) -> str:
    return API_KEY.sub(r"omni-\1-[redacted]", line)


class RedisLogStream(logging.Handler):
    def __init__(self, client: redis.Redis, key: str, *, max_lines: int = MAX_LINES):
        super().__init__()
        self.client = client
        self.key = key
        self.max_lines = max_lines
        self.dropped = 0
        self._lines: queue.Queue[str | None] = queue.Queue(maxsize=QUEUE_LINES)
        self._writer = threading.Thread(target=self._write_lines, name="log-stream", daemon=True)
        self.setFormatter(logging.Formatter(LINE_FORMAT))

    def start(self) -> None:
        self._writer.start()

    def emit(self, record: logging.LogRecord) -> None:
        if threading.current_thread() is self._writer:
            return  # what Redis' client logs while writing would feed the stream with itself
        try:
            line = mask_api_keys(self.format(record))
        except Exception:
            self.handleError(record)
            return
        try:
            self._lines.put_nowait(line)
        except queue.Full:
            self.dropped += 1

    def close(self) -> None:
        """Write what is queued (for at most CLOSE_WAIT_S), then stop; logging.shutdown calls this at exit."""
        if self._writer.is_alive():
            try:
                self._lines.put(None, timeout=CLOSE_WAIT_S)
            except queue.Full:
                pass
            self._writer.join(timeout=CLOSE_WAIT_S)
        super().close()

    def _write_lines(self) -> None:
        while True:
            batch = self._next_batch()
            lines = [line for line in batch if line is not None]
            if lines:
                self._write(lines)
            if None in batch:
                return

    def _next_batch(self) -> list[str | None]:
        """The next line (waiting for it) and whatever else is queued, up to BATCH_LINES."""
        batch = [self._lines.get()]
        while batch[-1] is not None and len(batch) < BATCH_LINES:
            try:
                batch.append(self._lines.get_nowait())
            except queue.Empty:
                break
        return batch

    def _write(self, lines: list[str]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for line in lines:
            pipe.xadd(self.key, {"line": line}, maxlen=self.max_lines, approximate=True)
        pipe.expire(self.key, KEEP_S)
        try:
            pipe.execute()
        except redis.RedisError:
            self.dropped += len(lines)  # logging about a logging failure would only add lines to drop


def publish_logs(client: redis.Redis, replica_id: str) -> RedisLogStream:
    """Publish the process's log lines (everything the root logger passes) to the replica's stream."""
    handler = RedisLogStream(client, streams.replica_logs(replica_id))
    logging.getLogger().addHandler(handler)
    handler.start()
    return handler
