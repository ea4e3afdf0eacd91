"""The generation stage engine: codec frames in, audio out, in chunks, batched across requests.

Each request collects codec frames as they stream in from the talker. A request is due
when it holds enough frames for its next chunk plus the decoder's right look-ahead
(`first_chunk_size` frames for the first chunk — a fast first packet — then
`async_chunk_size`), or when its input is complete. A request whose frames all arrived
before its first chunk is decoded as one whole sequence (that is the async-chunk-off
path, and it equals the model's own whole-sequence decoding exactly); a streamed request whose
input ended with a backlog drains it chunk by chunk, each decode bounded. Due windows of
the same shape are decoded in one batched forward (`WindowDecoder.decode`); each chunk's
audio is the window's samples for the chunk's frames, the left context and look-ahead
cut off (a decoder may batch more widely: its `batch_key`). A failing batch is retried request by
request, so one bad request fails alone.

Audio leaves as `payloads["audio"]` (float32, mono) with `params["sample_rate"]`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from stages.config import StageDeployConfig
from stages.engine import StageEngine
from stages.errors import InvalidRequest, StageFailure
from stages.protocol import StageError, StageOutput, StageRequest
from stages.tensors import to_wire

logger = logging.getLogger(__name__)


@dataclass
class Window:
    """Frames [start, end) of one request to emit audio for; `final` when they are its last."""

    stream: CodeStream
    start: int
    end: int
    final: bool


@dataclass
class CodeStream:
    request_id: str
    conditioning: Any
    frames: list[Any] = field(default_factory=list)
    input_done: bool = False
    emitted: int = 0
    seq: int = 0
    started: float = field(default_factory=time.perf_counter)


class WindowDecoder(Protocol):
    sample_rate: int
    lookahead: int
    """Frames after a chunk the decoder must see before that chunk's audio is final."""

    def open(self, request: StageRequest) -> Any:
        """Per-request conditioning (speaker, noise); raises InvalidRequest."""

    def frames_of(self, request: StageRequest) -> list[Any]:
        """The codec frames a request chunk carries (validated; raises InvalidRequest)."""

    def decode(self, windows: list[Window]) -> list[np.ndarray]:
        """Audio samples for each window's frames [start, end) (to the end when final)."""

    # Optional: `batch_key(window) -> hashable`: windows with equal keys may share one `decode` call
    # (default: the same start, end and finality).


class GenerationEngine(StageEngine):
    def __init__(self, decoder: WindowDecoder, stage_deploy: StageDeployConfig, stage_id: int = 2):
        self.decoder = decoder
        self.stage_id = stage_id
        self.max_batch = stage_deploy.max_batch
        self.max_frames = stage_deploy.max_length
        self.first_chunk = stage_deploy.first_chunk_size
        self.chunk = stage_deploy.async_chunk_size
        self.streams: dict[str, CodeStream] = {}

    def add_request(self, request: StageRequest) -> None:
        if request.request_id in self.streams:
            raise InvalidRequest("request_id", f"request {request.request_id!r} is already running")
        stream = CodeStream(request.request_id, self.decoder.open(request))
        self._extend(stream, request)
        self.streams[request.request_id] = stream

    def add_chunk(self, request: StageRequest) -> None:
        stream = self.streams.get(request.request_id)
        if stream is not None:
            self._extend(stream, request)

    def _extend(self, stream: CodeStream, request: StageRequest) -> None:
        frames = self.decoder.frames_of(request)
        if len(stream.frames) + len(frames) > self.max_frames:
            raise InvalidRequest("codes", f"more than max_length={self.max_frames} codec frames")
        stream.frames.extend(frames)
        stream.input_done = stream.input_done or request.finished

    def step(self) -> list[StageOutput]:
        windows = [window for window in map(self._due_window, self.streams.values()) if window][: self.max_batch]
        outputs = []
        for group in _same_shape_groups(windows, getattr(self.decoder, "batch_key", _frames_span)):
            outputs.extend(self._decode_group(group))
        return outputs

    def _due_window(self, stream: CodeStream) -> Window | None:
        available = len(stream.frames)
        if stream.input_done and (stream.emitted == 0 or available - stream.emitted <= self._backlog_limit):
            return Window(stream, stream.emitted, available, final=True)
        size = self.first_chunk if stream.emitted == 0 else self.chunk
        end = stream.emitted + size
        if available >= end + self.decoder.lookahead:
            return Window(stream, stream.emitted, end, final=False)
        return None

    @property
    def _backlog_limit(self) -> int:
        """Frames a streamed request's last window may hold: a talker that outran the decoder leaves
        a backlog, drained chunk by chunk so that no single decode runs for long."""
        return self.chunk + self.decoder.lookahead

    def _decode_group(self, group: list[Window]) -> list[StageOutput]:
        began = time.perf_counter()
        try:
            audios = self.decoder.decode(group)
        except Exception:
            if len(group) == 1:
                return [self._fail(group[0].stream, *_describe())]
            return [output for window in group for output in self._decode_group([window])]
        first = group[0]
        logger.debug(
            "decoded frames [%d, %d) of %d request(s) in %.3f s, %.3f s into the request; %d frames in",
            first.start,
            first.end,
            len(group),
            time.perf_counter() - began,
            time.perf_counter() - first.stream.started,
            len(first.stream.frames),
        )
        return [self._emit(window, audio) for window, audio in zip(group, audios, strict=False)]

    def _emit(self, window: Window, audio: np.ndarray) -> StageOutput:
        stream = window.stream
        stream.emitted = window.end
        output = StageOutput(
            request_id=stream.request_id,
            stage_id=self.stage_id,
            seq=stream.seq,
            finished=window.final,
            finish_reason="stop" if window.final else None,
            modality="audio",
            payloads={"audio": to_wire(np.ascontiguousarray(audio, dtype=np.float32))},
            params={"sample_rate": self.decoder.sample_rate, "frames": [window.start, window.end]},
        )
        stream.seq += 1
        if window.final:
            output.metrics["stage_duration_s"] = time.perf_counter() - stream.started
            del self.streams[stream.request_id]
        return output

    def _fail(self, stream: CodeStream, message: str, param: str | None) -> StageOutput:
        self.streams.pop(stream.request_id, None)
        return StageOutput(
            request_id=stream.request_id,
            stage_id=self.stage_id,
            seq=stream.seq,
            finished=True,
            finish_reason="error",
            error=StageError(message=message, type="server_error", param=param),
        )

    def abort(self, request_id: str) -> None:
        self.streams.pop(request_id, None)

    def has_unfinished(self) -> bool:
        return bool(self.streams)


def _frames_span(window: Window) -> tuple[int, int, bool]:
    return window.start, window.end, window.final


def _same_shape_groups(windows: list[Window], key) -> list[list[Window]]:
    groups: dict[Any, list[Window]] = {}
    for window in windows:
        groups.setdefault(key(window), []).append(window)
    return list(groups.values())


def _describe() -> tuple[str, str | None]:
    import sys

    error = sys.exc_info()[1]
    if isinstance(error, StageFailure):
        return error.message, error.param
    return f"code2wav failed: {type(error).__name__}: {error}", None
