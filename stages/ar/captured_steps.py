"""What the AR engine's CUDA graphs share: one graph per size over static buffers, and the pinned
host buffer their inputs are copied from.

`CapturedSteps` captures a step function once per size (a batch size, a token bucket, or any key
ordered smallest first), largest first, into one memory pool (the smaller graphs reuse the largest
one's memory). Each size is run once outside the capture first (lazy initialisations, autotuning,
compilation); a warm-up that fails raises, a capture that fails is logged and leaves that size and
every smaller one to run the function eagerly. `run(size)` replays the graph or runs the function,
and returns its outputs (a graph's are overwritten by the next replay). The decode graphs
(`cuda_graphs.py`), the prompt graphs (`prompt_graphs.py`) and the Qwen3-Omni code predictor's loop
(`stages/models/qwen3_code_predictor.py`) are built on it.

`PinnedStaging` is the host side of a step's inputs: filled in place through a numpy view, pinned
on CUDA so the copy to the device is queued rather than waited for, and refilled only once the
device has read the previous copy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np
import torch

from stages.sm_partition import capture_stream

logger = logging.getLogger(__name__)


class CapturedSteps:
    def __init__(self, forward: Callable[[Any], Any], what: str):
        self.forward = forward
        self.what = what
        """How the log names the step ("decode step of batch", "prompt step of tokens")."""
        self.graphs: dict[Hashable, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[Hashable, Any] = {}

    @torch.inference_mode()
    def capture(self, sizes: list, warm_up: Callable[[Any], Any] | None = None) -> None:
        pool = None
        for size in reversed(sizes):
            (warm_up or self.forward)(size)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph, pool=pool, stream=capture_stream()):
                    self.outputs[size] = self.forward(size)
            except Exception:
                logger.exception("capturing the %s %s failed; smaller sizes run eagerly", self.what, size)
                self.outputs.pop(size, None)
                break
            pool = graph.pool() if pool is None else pool
            self.graphs[size] = graph
        torch.cuda.synchronize()

    def run(self, size: Hashable) -> Any:
        if size in self.graphs:
            self.graphs[size].replay()
            return self.outputs[size]
        return self.forward(size)


class PinnedStaging:
    def __init__(self, target: torch.Tensor):
        self.target = target
        cuda = target.device.type == "cuda"
        self.host = torch.zeros(target.shape, dtype=target.dtype, pin_memory=cuda)
        self._copied = torch.cuda.Event() if cuda else None

    def fill(self) -> np.ndarray:
        """The host buffer to fill (a numpy view), once the device has read the previous copy."""
        if self._copied is not None:
            self._copied.synchronize()
        return self.host.numpy()

    def send(self, rows: int | None = None) -> None:
        """Copy the host buffer (its first `rows` rows) to the device, asynchronously."""
        host, target = (self.host, self.target) if rows is None else (self.host[:rows], self.target[:rows])
        target.copy_(host, non_blocking=True)
        if self._copied is not None:
            self._copied.record()
