"""Qwen3-Omni code2wav as a window decoder: 16-codebook frames -> 24 kHz audio (1920 samples/frame).

`Qwen3OmniMoeCode2Wav` is causal apart from its transposed convolutions, each of which
reads one input step ahead (so a window's last ~2 frames of audio wait for the next
frames: `lookahead = 2`), and its transformer attends a sliding window of
`sliding_window` frames per layer. A chunk decoded with `left_context` >= layers x
(sliding_window - 1) + conv margin frames of left context therefore equals the whole-sequence
decode up to float rounding (RoPE at other absolute positions); the oracle test checks it.
For the 30B's code2wav that is 576 frames per chunk, so the family decodes with 25 frames of left
context by default, as transformers' `chunked_decode` and vLLM-Omni do
(`options.code2wav_left_context`: a number of frames, or "exact").

A whole sequence decodes in one forward, which is what
`Qwen3OmniMoeForConditionalGeneration.generate` does for up to 300 frames (it switches
to `chunked_decode(300, left_context=25)` beyond that).

Batching: the decode of a window depends only on its codes, so windows of different requests at
different points of their streams share one forward whenever their spans (left context, chunk,
look-ahead) have the same length (`batch_key`). On CUDA each (batch, span length) shape runs in a
CUDA graph captured the first time it is seen (`WindowGraphs`; batches padded up to 1, 2, 4, 8, 16,
... rows, so few shapes cover every batch), least recently used out beyond `max_graphs`; a shape that
fails to capture runs eagerly from then on.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any

import numpy as np

from stages.errors import InvalidRequest
from stages.generation.engine import Window
from stages.protocol import StageRequest
from stages.sm_partition import capture_stream
from stages.tensors import to_numpy

logger = logging.getLogger(__name__)

SAMPLE_RATE = 24000
CONV_MARGIN = 8


class Code2WavDecoder:
    sample_rate = SAMPLE_RATE
    lookahead = 2

    def __init__(
        self,
        module,
        *,
        device: str,
        left_context: int | None = None,
        cuda_graphs: bool = True,
        max_graphs: int = 64,
        max_batch: int = 16,
    ):
        self.module = module
        self.device = device
        config = module.config
        self.num_quantizers = config.num_quantizers
        self.codebook_size = config.codebook_size
        self.samples_per_frame = int(module.total_upsample)
        self.seconds_per_frame = self.samples_per_frame / SAMPLE_RATE
        self.left_context = self.exact_left_context(config) if left_context is None else left_context
        is_cuda = str(device).startswith("cuda")
        self.graphs = WindowGraphs(module, max_graphs, max_batch) if cuda_graphs and is_cuda else None

    @staticmethod
    def exact_left_context(config) -> int:
        """Frames of left context after which a chunk equals the whole-sequence decode."""
        return config.num_hidden_layers * (config.sliding_window - 1) + CONV_MARGIN

    def batch_key(self, window: Window) -> int:
        start, end = self._span(window)
        return end - start

    def open(self, request: StageRequest) -> Any:
        return None

    def frames_of(self, request: StageRequest) -> list[Any]:
        codes = request.payloads.get("codes")
        if codes is None:
            return []
        array = np.asarray(to_numpy(codes))
        if array.ndim != 2 or array.shape[1] != self.num_quantizers:
            raise InvalidRequest("codes", f"expected [frames, {self.num_quantizers}] codes, got {list(array.shape)}")
        if array.size and (array.min() < 0 or array.max() >= self.codebook_size):
            raise InvalidRequest("codes", f"codes must lie in [0, {self.codebook_size})")
        return [row for row in array.astype(np.int64)]

    def decode(self, windows: list[Window]) -> list[np.ndarray]:
        import torch

        spans = [self._span(window) for window in windows]
        codes = np.stack(
            [np.stack(window.stream.frames[a:b], axis=1) for window, (a, b) in zip(windows, spans, strict=False)]
        )
        codes = torch.from_numpy(codes).to(self.device)
        with torch.no_grad():
            audio = self.graphs(codes) if self.graphs is not None else self.module(codes)
            wav = audio[: len(windows)].float().cpu().numpy()[:, 0]
        results = []
        for window, (a, _b), samples in zip(windows, spans, wav, strict=False):
            begin = (window.start - a) * self.samples_per_frame
            end = samples.shape[-1] if window.final else (window.end - a) * self.samples_per_frame
            results.append(samples[begin:end])
        return results

    def _span(self, window: Window) -> tuple[int, int]:
        start = max(0, window.start - self.left_context)
        end = window.end if window.final else window.end + self.lookahead
        return start, end


class WindowGraphs:
    """CUDA graphs of code2wav's forward, one per (padded batch, window length).

    A batch of n windows runs in the graph of the smallest bucket >= n (1, 2, 4, 8, then multiples of
    16 up to `max_batch`; larger batches run eagerly), its codes copied into the graph's static input
    with the first window's codes repeated in the padding rows (their audio is dropped). A new shape
    costs one eager forward (on a side stream, as capture requires) and one captured; the capture is
    thread-local, so the AR stages on other threads keep launching meanwhile.
    """

    def __init__(self, module, max_graphs: int, max_batch: int):
        from stages.ar.cuda_graphs import bucket_sizes

        self.module = module
        self.max_graphs = max(1, max_graphs)
        self.sizes = bucket_sizes(max_batch)
        self.graphs: OrderedDict[tuple, tuple[Any, Any, Any]] = OrderedDict()
        self.uncapturable: set[tuple] = set()
        self.pool = None

    def __call__(self, codes):
        """Audio [>= batch, 1, samples] of codes [batch, quantizers, frames] (padding rows past the batch)."""
        count = codes.shape[0]
        size = next((s for s in self.sizes if s >= count), None)
        key = (size, *codes.shape[1:])
        if size is None or key in self.uncapturable:
            return self.module(codes)
        captured = self.graphs.get(key) or self._capture(key, codes)
        if captured is None:
            return self.module(codes)
        self.graphs.move_to_end(key)
        graph, static_codes, audio = captured
        static_codes[:count].copy_(codes)
        static_codes[count:].copy_(codes[:1].expand(size - count, *codes.shape[1:]))
        graph.replay()
        return audio

    def _capture(self, key: tuple, codes):
        import torch

        began = time.perf_counter()
        size = key[0]
        static_codes = codes[:1].repeat(size, 1, 1)
        static_codes[: codes.shape[0]].copy_(codes)
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.module(static_codes)  # lazy initialisations happen outside the capture
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool, stream=capture_stream(), capture_error_mode="thread_local"):
                audio = self.module(static_codes)
        except Exception:
            logger.exception("capturing code2wav for %s (batch, quantizers, frames) failed; it runs eagerly", key)
            self.uncapturable.add(key)
            return None
        self.pool = self.pool or graph.pool()
        self.graphs[key] = (graph, static_codes, audio)
        while len(self.graphs) > self.max_graphs:
            self.graphs.popitem(last=False)
        logger.info("code2wav: %s (batch, quantizers, frames) captured in %.3f s", key, time.perf_counter() - began)
        return self.graphs[key]
