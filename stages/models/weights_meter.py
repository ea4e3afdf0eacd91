"""How much of its weights a stage's loader has read: bytes loaded of bytes total, as it reads them.

A driver that wants to hear it (the replica host, for its heartbeat) loads inside `metering(listener)`;
the loaders (stages/models/omni_weights.py, the torch AR engine's `load_causal_lm`, the diffusion
engine's `load_pipeline`, `build_random` for dummy weights) find the meter with `active_meter()` and
tell it what they will read (`expect`, `expect_files`) and what they read (`read`, `file_read`,
`done`, `file_done`). Without a meter they are told nothing and nothing is counted.

Parts are named: a weight file by its resolved path, a prefix of a file's tensors, or a module of
random weights. A part's count never passes its size, so two hooks that see the same bytes (a
file's tensors one by one, then the whole file once its loader returns) cannot count them twice.
A file read that no loader announced is announced then, with its size: the total only ever holds
what a loader declared it reads or was seen reading.

`OMNISTAGE_TEST_WEIGHT_READ_DELAY_S` (tests only) sleeps that long after each counted read, so a
tiny checkpoint loads slowly enough to be seen loading.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

Listener = Callable[[int, int], None]
"""Hears (bytes loaded, bytes total) after every change."""


class WeightsMeter:
    def __init__(self, listener: Listener | None = None):
        self.listener = listener
        self._lock = threading.Lock()
        self._report_lock = threading.Lock()
        self._sizes: dict[str, int] = {}
        self._read: dict[str, int] = {}
        self._delay_s = float(os.environ.get("OMNISTAGE_TEST_WEIGHT_READ_DELAY_S") or 0)

    @property
    def loaded(self) -> int:
        with self._lock:
            return sum(self._read.values())

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._sizes.values())

    def expect(self, part: str, nbytes: int) -> None:
        """`part` will be read, `nbytes` of it (a second announcement of one part changes nothing)."""
        with self._lock:
            if part in self._sizes:
                return
            self._sizes[part] = int(nbytes)
            self._read[part] = 0
        self._changed()

    def expect_files(self, paths: Iterable[Path]) -> None:
        for path in paths:
            self.expect(file_part(path), Path(path).stat().st_size)

    def read(self, part: str, nbytes: int) -> None:
        """`nbytes` more of `part` were read (an unannounced part is not counted)."""
        with self._lock:
            if part not in self._sizes:
                return
            self._read[part] = min(self._sizes[part], self._read[part] + int(nbytes))
        self._changed(slow=True)

    def done(self, part: str, nbytes: int | None = None) -> None:
        """All of `part` was read; `nbytes` (when given) is its size as read, announced or not."""
        with self._lock:
            if nbytes is not None:
                self._sizes[part] = int(nbytes)
            elif part not in self._sizes:
                return
            self._read[part] = self._sizes[part]
        self._changed(slow=True)

    def file_read(self, path: str | os.PathLike, nbytes: int) -> None:
        part = file_part(path)
        self._announce_file(part)
        self.read(part, nbytes)

    def file_done(self, path: str | os.PathLike) -> None:
        part = file_part(path)
        self._announce_file(part)
        self.done(part)

    def _announce_file(self, part: str) -> None:
        with self._lock:
            known = part in self._sizes
        if not known and os.path.isfile(part):
            self.expect(part, os.path.getsize(part))

    def _changed(self, slow: bool = False) -> None:
        if self.listener is not None:
            with self._report_lock:  # a library's loading threads: the listener hears the counts in order
                with self._lock:
                    loaded, total = sum(self._read.values()), sum(self._sizes.values())
                self.listener(loaded, total)
        if slow and self._delay_s > 0:
            time.sleep(self._delay_s)


def file_part(path: str | os.PathLike) -> str:
    return os.path.realpath(os.fspath(path))


_active: list[WeightsMeter] = []
_active_lock = threading.Lock()


@contextlib.contextmanager
def metering(listener: Listener | None = None) -> Iterator[WeightsMeter]:
    """Loads inside this block are counted by the meter it yields (the innermost block's, when nested)."""
    meter = WeightsMeter(listener)
    with _active_lock:
        _active.append(meter)
    try:
        yield meter
    finally:
        with _active_lock:
            _active.remove(meter)


def active_meter() -> WeightsMeter | None:
    """The meter of the innermost `metering` block open in this process, if any (loaders and the threads
    of their libraries count into it)."""
    with _active_lock:
        return _active[-1] if _active else None
