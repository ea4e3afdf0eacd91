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
    """Whether a payload's reader runs on this host: the stage that reads it has live
    replicas, and every one of them runs here (any of them may be chosen to read it)."""
    hosts = set(reader_hosts)
    return bool(here) and hosts == {here}
