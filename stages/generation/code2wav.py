"""Qwen3-Omni code2wav as a window decoder: 16-codebook frames -> 24 kHz audio (1920 samples/frame).

`Qwen3OmniMoeCode2Wav` is causal apart from its transposed convolutions, each of which
reads one input step ahead (so a window's last ~2 frames of audio wait for the next
frames: `lookahead = 2`), and its transformer attends a sliding window of
`sliding_window` frames per layer. A chunk decoded with `left_context` >= layers x
(sliding_window - 1) + conv margin frames of left context therefore equals the whole-sequence
decode up to float rounding (RoPE at other absolute positions); the oracle test checks it.
Smaller left contexts (vLLM-Omni uses 25) trade exactness for speed: set
`options.code2wav_left_context` in the stage's DeployConfig.

A whole sequence decodes in one forward, which is what
`Qwen3OmniMoeForConditionalGeneration.generate` does for up to 300 frames (it switches
to `chunked_decode(300, left_context=25)` beyond that; this decoder stays exact instead).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stages.errors import InvalidRequest
from stages.generation.engine import Window
from stages.protocol import StageRequest
from stages.tensors import to_numpy

SAMPLE_RATE = 24000
CONV_MARGIN = 8


class Code2WavDecoder:
    sample_rate = SAMPLE_RATE
    lookahead = 2

    def __init__(self, module, *, device: str, left_context: int | None = None):
        self.module = module
        self.device = device
        config = module.config
        self.num_quantizers = config.num_quantizers
        self.codebook_size = config.codebook_size
        self.samples_per_frame = int(module.total_upsample)
        exact = config.num_hidden_layers * (config.sliding_window - 1) + CONV_MARGIN
        self.left_context = exact if left_context is None else left_context

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
        with torch.no_grad():
            wav = self.module(torch.from_numpy(codes).to(self.device)).float().cpu().numpy()[:, 0]
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
