"""The history's write-behind log in Redis: how a request's history leaves the request path
without waiting on the database, and how it gets there without loss.

    await history_append(client, request_id, user_id, [events])      # request path, one round trip
    history_catch_up(request_ids)                                      # the writer, and readers

One Lua script appends a request's events to its pending hash (`rows:<request id>`, one field
per event, numbered in order), marks the request pending (globally and for its user) and adds
a notice to the history stream. The writer (history_writer.py) reads the stream through a
consumer group, applies the pending events of the requests it names in one transaction
(history_apply.py), then forgets exactly the events it applied. Nothing is forgotten before
the database has it: a writer killed at any point leaves the events in their hash and the
notice unacknowledged, and the next writer (or a reader) applies them again, idempotently.

A reader of history catches up first: it applies what is pending for the rows it is about to
show (the viewer's, or everyone's for an admin) through the same idempotent apply, so a
just-finished request reads in its final state even while the writer lags or is down.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterable
from functools import lru_cache
from typing import Literal

import redis
import redis.asyncio
from django.conf import settings

from control_plane.inference.history_apply import history_apply
from control_plane.inference.history_events import HistoryEvent, decode, encode
from control_plane.inference.redis_names import (
    pending_all,
    pending_of_user_prefix,
    row_key,
    sequence,
    serving_leases,
    stream_name,
)
from control_plane.redis_client import shared_redis

log = logging.getLogger(__name__)
USER_FIELD = "user"

_APPEND = """
local count = #ARGV - 5
local last = redis.call('INCRBY', KEYS[2], count)
for i = 1, count do
    redis.call('HSET', KEYS[1], string.format('%016d', last - count + i), ARGV[i + 5])
end
redis.call('SADD', KEYS[3], ARGV[1])
if ARGV[2] ~= '' then
    redis.call('HSET', KEYS[1], 'user', ARGV[2])
    redis.call('SADD', ARGV[3] .. ARGV[2], ARGV[1])
end
redis.call('XADD', KEYS[4], '*', 'request', ARGV[1])
if ARGV[4] == 'hold' then
    redis.call('ZADD', KEYS[5], ARGV[5], ARGV[1])
elseif ARGV[4] == 'release' then
    redis.call('ZREM', KEYS[5], ARGV[1])
end
return last
"""

_FORGET = """
for i = 3, #ARGV do
    redis.call('HDEL', KEYS[1], ARGV[i])
end
local left = redis.call('HLEN', KEYS[1])
local user = redis.call('HGET', KEYS[1], 'user')
if left == 0 or (left == 1 and user) then
    redis.call('DEL', KEYS[1])
    redis.call('SREM', KEYS[2], ARGV[1])
    if user then
        redis.call('SREM', ARGV[2] .. user, ARGV[1])
    end
    return 1
end
return 0
"""


@lru_cache(maxsize=8)
def _client_for(url: str) -> redis.Redis:
    return shared_redis(url, timeout=5.0)


def client() -> redis.Redis:
    return _client_for(settings.REDIS_URL)


# ------------------------------------------------------------------ the request path


def _append_call(request_id: str, user_id: int | None, events: list[HistoryEvent], lease: str) -> tuple[list, list]:
    keys = [row_key(request_id), sequence(), pending_all(), stream_name(), serving_leases()]
    args = [request_id, "" if user_id is None else str(user_id), pending_of_user_prefix(), lease, time.time()]
    return keys, args + [encode(event) for event in events]


_APPEND_SHA = hashlib.sha1(_APPEND.encode()).hexdigest()


async def history_append(
    client: redis.asyncio.Redis,
    request_id: str,
    user_id: int | None,
    events: list[HistoryEvent],
    lease: Literal["hold", "release", ""] = "",
) -> None:
    """Accept `events` of one request: once this returns, they reach the database. `lease`
    takes or drops the request's serving lease (serving_leases.py) in the same round trip."""
    if events:
        keys, args = _append_call(request_id, user_id, events, lease)
        try:
            await client.evalsha(_APPEND_SHA, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:  # a fresh (or restarted) Redis: EVAL loads it
            await client.eval(_APPEND, len(keys), *keys, *args)


# ------------------------------------------------------------------ catching up


def pending_requests(*, user_id: int | None = None, everyone: bool = False, limit: int = 10_000) -> list[str]:
    """Request ids with events not yet in the database: a user's, or everyone's."""
    key = pending_all() if everyone else f"{pending_of_user_prefix()}{user_id}"
    found = []
    for member in client().sscan_iter(key, count=1000):
        found.append(member.decode())
        if len(found) >= limit:
            break
    return found


def history_catch_up(request_ids: Iterable[str]) -> list[str]:
    """Apply the pending events of `request_ids` (one transaction), then forget them; requests
    whose events cannot be written are logged and left pending. Returns those request ids."""
    ids = list(dict.fromkeys(request_ids))
    if not ids:
        return []
    redis_client = client()
    pipe = redis_client.pipeline(transaction=False)
    for request_id in ids:
        pipe.hgetall(row_key(request_id))
    pending: dict[str, dict[str, HistoryEvent]] = {}
    for request_id, fields in zip(ids, pipe.execute(), strict=True):
        events = {key.decode(): decode(value) for key, value in sorted(fields.items()) if key != USER_FIELD.encode()}
        if events:
            pending[request_id] = events
    if not pending:
        return []
    failed = _apply(pending)
    pipe = redis_client.pipeline(transaction=False)
    for request_id, events in pending.items():
        if request_id not in failed:
            keys = [row_key(request_id), pending_all()]
            pipe.eval(_FORGET, len(keys), *keys, request_id, pending_of_user_prefix(), *events)
    pipe.execute()
    return sorted(failed)


def _apply(pending: dict[str, dict[str, HistoryEvent]]) -> set[str]:
    try:
        history_apply([event for events in pending.values() for event in events.values()])
        return set()
    except Exception:  # one bad request must not hold back the others: write them one by one
        log.warning("a history batch of %d requests failed; writing them one by one", len(pending), exc_info=True)
    failed = set()
    for request_id, events in pending.items():
        try:
            history_apply(events.values())
        except Exception:
            log.exception("could not write the history of %s; it stays pending", request_id)
            failed.add(request_id)
    return failed


READ_PATIENCE_S = 10.0
"""How long a read retries writing pending history that could not be written at once (the
database busy with the writer's own batch), before it shows what the database has."""


def history_catch_up_for(*, user_id: int | None = None, everyone: bool = False) -> None:
    """Before a read: write what is pending of the rows a viewer may see. Never fails the read
    (without Redis the database is all there is to show)."""
    deadline = time.monotonic() + READ_PATIENCE_S
    try:
        left = history_catch_up(pending_requests(user_id=user_id, everyone=everyone))
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = history_catch_up(left)  # those the writer wrote meanwhile have nothing pending
        if left:
            log.warning("%d requests' history is not written yet; the read shows the database as it is", len(left))
    except redis.RedisError as error:
        log.warning("history not caught up before a read: %s", error)
