"""A GPU load looped on its own thread while a benchmark measures something beside it.

with Background(load.step, stream) as running:
    ...                      # measured beside the load
running.rate                 # the load's iterations per second meanwhile
"""

from __future__ import annotations

import threading
import time

import torch


class Background:
    """`run` looped on `stream` on its own thread, one sync an iteration, from 0.2 s before the block
    (the load is running when the measurement starts) until the block ends."""

    def __init__(self, run, stream):
        self.run, self.stream, self.stop = run, stream, threading.Event()

    def _loop(self) -> None:
        with torch.cuda.stream(self.stream):
            while not self.stop.is_set():
                self.run()
                self.stream.synchronize()
                self.iterations += 1

    def __enter__(self):
        self.iterations, self.began = 0, time.perf_counter()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        time.sleep(0.2)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.rate = self.iterations / (time.perf_counter() - self.began)
