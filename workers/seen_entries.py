"""Which (request id, seq) inputs a replica host has already taken, to ignore redeliveries.

Streams deliver at least once: an orchestrator that restarts may send a chunk again, and
a host that takes over a dead consumer's pending entries may see one twice. A request's
inputs are remembered after it ends too (bounded: the oldest requests are forgotten first),
so a late duplicate of a finished or aborted request does not start it again.
"""

from __future__ import annotations

from collections import OrderedDict


class SeenEntries:
    def __init__(self, max_requests: int = 10_000):
        self.max_requests = max_requests
        self._seqs: OrderedDict[str, set[int]] = OrderedDict()
        self._closed: set[str] = set()

    def first_time(self, request_id: str, seq: int) -> bool:
        """Record (request_id, seq); False if it was seen already or the request was aborted."""
        if request_id in self._closed:
            return False
        seqs = self._seqs.get(request_id)
        if seqs is None:
            seqs = self._seqs[request_id] = set()
            self._forget_oldest()
        if seq in seqs:
            return False
        seqs.add(seq)
        return True

    def close(self, request_id: str) -> None:
        """Ignore every later input of this request (it was aborted or failed)."""
        self._seqs.setdefault(request_id, set())
        self._closed.add(request_id)
        self._forget_oldest()

    def _forget_oldest(self) -> None:
        while len(self._seqs) > self.max_requests:
            request_id, _ = self._seqs.popitem(last=False)
            self._closed.discard(request_id)
