"""Invalidation of per-process caches across every process, through one Redis pub/sub channel.

A cache of database rows (API keys, running deployments) registers a callback for its topic;
whatever changes those rows calls `publish(topic, value)`, which runs after the transaction
commits: the callbacks of this process run at once, and every other process's run when the
message arrives (milliseconds), from a listener thread per process.

A cache must not be trusted while the listener is not subscribed (start-up, Redis down,
reconnecting): `trusted()` says so, and every (re)subscription and every loss of the channel
calls each callback with `EVERYTHING`, since messages sent meanwhile were lost. `generation`
counts the invalidations a process has seen: a cache that loaded a row from the database
stores it only if no invalidation arrived meanwhile.

    invalidation.register("key", lambda value: cache.drop(value))
    invalidation.publish("key", prefix)
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

import redis
from django.conf import settings
from django.db import transaction

from control_plane.redis_client import shared_redis
from stages import streams

log = logging.getLogger(__name__)

EVERYTHING = "*"
Callback = Callable[[str], None]


def channel() -> str:
    return f"{streams.PREFIX}:invalidate"


class Listener:
    def __init__(self, url: str, channel_name: str):
        self.url = url
        self.channel = channel_name
        self.callbacks: dict[str, list[Callback]] = {}
        self.generation = 0
        self.subscribed = threading.Event()
        self.pid = os.getpid()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._publisher: redis.Redis | None = None

    def publisher(self) -> redis.Redis:
        if self._publisher is None:
            self._publisher = shared_redis(self.url)
        return self._publisher

    def register(self, topic: str, callback: Callback) -> None:
        self.callbacks.setdefault(topic, []).append(callback)

    def trusted(self) -> bool:
        """Whether caches may answer now; starts the listener thread on first use."""
        self._ensure_thread()
        return self.subscribed.is_set()

    def start(self) -> None:
        """Subscribe now rather than at the first lookup (web processes, at start-up)."""
        self._ensure_thread()

    def deliver(self, topic: str, value: str) -> None:
        self.generation += 1
        for callback in self.callbacks.get(topic, ()):
            callback(value)

    def deliver_everything(self) -> None:
        self.generation += 1
        for callbacks in self.callbacks.values():
            for callback in callbacks:
                callback(EVERYTHING)

    def _ensure_thread(self) -> None:
        if self.pid != os.getpid():  # a forked child inherits the flag but not the thread
            self.pid = os.getpid()
            self.subscribed.clear()
            self._thread = None
            self.deliver_everything()
        if self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._listen, name="invalidation", daemon=True)
                self._thread.start()

    def _listen(self) -> None:
        backoff = 0.1
        while True:
            client = redis.Redis.from_url(self.url, socket_connect_timeout=2, socket_timeout=5, health_check_interval=2)
            pubsub = client.pubsub()
            try:
                pubsub.subscribe(self.channel)
                while True:
                    message = pubsub.get_message(timeout=1.0)
                    if message is None:
                        continue
                    if message["type"] == "subscribe":
                        self.deliver_everything()  # whatever was published before now is lost
                        self.subscribed.set()
                        backoff = 0.1
                    elif message["type"] == "message":
                        data = message["data"]
                        topic, _, value = (data.decode() if isinstance(data, bytes) else str(data)).partition(":")
                        self.deliver(topic, value)
            except Exception as error:  # noqa: BLE001 - any failure: stop trusting, reconnect
                if self.subscribed.is_set():
                    log.warning("cache invalidation channel lost (%s); caches bypassed until it is back", error)
                self.subscribed.clear()
                self.deliver_everything()
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                try:
                    pubsub.close()
                    client.close()
                except Exception:  # noqa: BLE001 - closing a broken connection
                    pass


_listeners: dict[tuple[str, str], Listener] = {}
_registrations: list[tuple[str, Callback]] = []


def listener() -> Listener:
    """This process's listener for the configured Redis and prefix."""
    identity = (settings.REDIS_URL, channel())
    found = _listeners.get(identity)
    if found is None:
        found = _listeners.setdefault(identity, Listener(*identity))
        for topic, callback in _registrations:
            found.register(topic, callback)
    return found


def register(topic: str, callback: Callback) -> None:
    """Call `callback(value)` on every `publish(topic, value)`, and with EVERYTHING when messages may be lost."""
    _registrations.append((topic, callback))
    for existing in _listeners.values():
        existing.register(topic, callback)


def publish(topic: str, value: str = EVERYTHING) -> None:
    """Tell this process now and every process once the current transaction (if any) commits
    (this one again then: it may have read the old row meanwhile)."""
    listener().deliver(topic, value)

    def send() -> None:
        listener().deliver(topic, value)
        try:
            listener().publisher().publish(channel(), f"{topic}:{value}")
        except redis.RedisError as error:
            # the other processes keep their entries until the caches' TTL: say so loudly
            log.error("could not publish cache invalidation %s:%s: %s", topic, value, error)

    transaction.on_commit(send)


class InvalidatedCache:
    """Values by name, kept per process: answered only while this process's listener is
    subscribed, each for `ttl_s()` at most, dropped by `publish(topic, name)` (EVERYTHING: all).

    `load` stores what its loader read unless an invalidation arrived during the read."""

    def __init__(self, topic: str, ttl_s: Callable[[], float], max_entries: int = 100_000):
        self.topic = topic
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.entries: dict[str, tuple[float, object]] = {}
        register(topic, self.drop)

    def get(self, name: str):
        if not listener().trusted():
            return None
        entry = self.entries.get(name)
        if entry is None or time.monotonic() - entry[0] > self.ttl_s():
            return None
        return entry[1]

    def load(self, name: str, loader: Callable[[str], object], keep: Callable[[object], bool] = bool):
        channel = listener()
        generation, trusted = channel.generation, channel.trusted()
        value = loader(name)
        if trusted and generation == channel.generation and keep(value):
            if len(self.entries) >= self.max_entries:
                self.entries.clear()
            self.entries[name] = (time.monotonic(), value)
        return value

    def drop(self, name: str) -> None:
        if name == EVERYTHING:
            self.entries.clear()
        else:
            self.entries.pop(name, None)

    def drop_where(self, predicate: Callable[[object], bool]) -> None:
        for name, (_, value) in list(self.entries.items()):
            if predicate(value):
                self.entries.pop(name, None)
