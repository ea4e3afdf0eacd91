"""Which connector carries a payload: by size and locality, unless the deploy config says."""

from __future__ import annotations

from collections.abc import Iterable

INLINE_MAX_BYTES = 64 * 1024


def choose_connector(
    nbytes: int, same_host: bool, preference: str = "auto", inline_max_bytes: int = INLINE_MAX_BYTES
) -> str:
    """ "inline" for small payloads, "shm" on the same host, else "redis"; an explicit
    preference ("inline", "shm", "redis") wins, except that shm cannot cross hosts."""
    if preference == "shm" and not same_host:
        return "redis"
    if preference in ("inline", "shm", "redis"):
        return preference
    if nbytes <= inline_max_bytes:
        return "inline"
    return "shm" if same_host else "redis"


def reader_is_local(reader_hosts: Iterable[str], here: str) -> bool:
    """Whether a payload's reader runs on this host: a live replica of the stage that reads it
    runs here (the orchestrator places a request's next stage on its upstream's host when it can;
    a reader elsewhere asks the writer to export the segment to Redis)."""
    return bool(here) and here in set(reader_hosts)
