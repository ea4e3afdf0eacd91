"""Inputs a replica host drops without working on them, counted and logged in summary.

Two kinds: inputs of requests that ended (the orchestrator listed them in
`streams.aborted_requests`, or this host aborted or failed them), and redeliveries of inputs
it already took. After a restart a host can meet thousands of them at once (the backlog of
requests that failed meanwhile): they are dropped in bulk, counted in the heartbeat's
`dropped_inputs`, and logged once per read, not once each.
"""

from __future__ import annotations

import logging

import redis

from stages import streams

log = logging.getLogger("workers.replica_host")


class AbortedRequests:
    """Which of some wire ids the orchestrator has ended (one round trip per question)."""

    def __init__(self, client: redis.Redis):
        self.client = client
        self.key = streams.aborted_requests()

    def among(self, request_ids: list[str]) -> set[str]:
        if not request_ids:
            return set()
        scores = self.client.zmscore(self.key, request_ids)
        return {request_id for request_id, score in zip(request_ids, scores, strict=True) if score is not None}


class DroppedInputs:
    def __init__(self, replica_id: str):
        self.replica_id = replica_id
        self.total = 0
        self._batch: dict[str, int] = {}

    def add(self, request_id: str) -> None:
        self.total += 1
        self._batch[request_id] = self._batch.get(request_id, 0) + 1

    def log_batch(self) -> None:
        """One line for what this read dropped."""
        if not self._batch:
            return
        dropped, requests = sum(self._batch.values()), len(self._batch)
        example = next(iter(self._batch))
        log.info(
            "replica %s: dropped %d inputs of %d ended or already-taken requests (e.g. %s); %d since start",
            self.replica_id, dropped, requests, example, self.total,
        )  # fmt: skip
        self._batch = {}
